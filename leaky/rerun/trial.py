"""One re-run: the program from its start, K training steps, then H held-out steps.

`leaky fix` and `leaky probe` both run the user's program (a script or a callable) as trials,
each with

- its seeds shifted by `offset` (0: exactly the user's run): every `torch.manual_seed`,
  `random.seed` and `numpy.random.seed` call adds the offset, and the global generators
  start from the offset when the program seeds nothing;
- optionally the `Changes` one run is made under (a fix's parts, a probe's replays);
- an audit of its first steps, for the leak metrics;
- a `StepControl` that counts optimizer steps, keeps the loss of each, and after K steps
  freezes the parameters (every later step is undone, and with `freeze_modules` every
  write into a module outside the optimizer too: `frozen`) for H more steps: their losses
  are the model's loss at step K on the next H batches of the program's own stream, which
  it has not trained on. Then the program is stopped.

`same_losses` says whether two trials from the same seeds were the same run, bit for bit.
"""
from __future__ import annotations

import contextlib
import io
import random
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.nn.modules import module as module_globals
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from leaky.audit import Audit
from leaky.config import AuditConfig
from leaky.failure import ScriptFailure, failure_of
from leaky.rerun.frozen import FrozenModules
from leaky.process.patch import Patch
from leaky.record.monitor import TensorBackwardPatch
from leaky.record.sites import SourceLocator
from leaky.record.recorder import StopObserving
from leaky.report import Report
from leaky.stats import AuditStats


class Together:
    """Context managers entered in order and exited in reverse, also when one fails."""

    def __init__(self, parts) -> None:
        self.parts = list(parts)
        self._stack: ExitStack | None = None

    def __enter__(self) -> "Together":
        self._stack = ExitStack()
        try:
            for part in self.parts:
                self._stack.enter_context(part)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None


class Changes(Together):
    """The parts one run is changed by (a fix's, a probe's). Entered before the audit, except
    the parts marked `outer` (they must wrap the audit's own patches): `outer()` enters those
    after it."""

    def __init__(self, *parts) -> None:
        super().__init__(part for part in parts if not getattr(part, "outer", False))
        self.all_parts = parts

    def outer(self) -> Together:
        return Together(part for part in self.all_parts if getattr(part, "outer", False))

    @property
    def applied(self) -> list[str]:
        """What each part changed, one line each (empty: the target was never met)."""
        return [line for part in self.all_parts for line in getattr(part, "applied", [])]


@dataclass
class Trial:
    """What one run showed."""

    offset: int
    fix: str | None
    losses: list[float]                 # training loss of each optimizer step, K at most
    holdout: list[float]                # loss on the H batches after step K, model frozen at step K
    seconds: float
    status: str                         # "stopped" (after K + H steps) | "finished" | "failed" | "exited"
    error: str | None = None            # one line: the program's exception, if it raised or exited nonzero
    applied: list[str] = field(default_factory=list)   # what the fix changed (empty: never met)
    report: Report | None = None
    stats: AuditStats | None = None
    output: str = ""                    # the program's last printed lines
    backward_site: tuple[str, int] | None = None       # where the first loss.backward() was called
    module_sites: dict[int, tuple[str, int]] = field(default_factory=dict)   # id(module) -> where built
    modules: object = None              # the audit's ModuleTracker: paths and types of the modules
    failure: ScriptFailure | None = None   # how the program failed: Python's exit status and traceback
    held_out_as: list[str] = field(default_factory=list)   # what the held-out steps changed to score (measure)
    lrs: list[float | None] = field(default_factory=list)   # the lead optimizer's learning rate at each of `losses`

    @property
    def steps(self) -> int:
        return len(self.losses)

    @property
    def held_out(self) -> bool:
        return bool(self.holdout)

    @property
    def score(self) -> float | None:
        """Mean held-out loss (inf if any is non-finite); without held-out batches, the
        mean of the last five training losses; None when no step ran."""
        values = self.holdout or self.losses[-5:]
        if not values:
            return None
        if any(v != v or v in (float("inf"), float("-inf")) for v in values):
            return float("inf")
        return sum(values) / len(values)


class StepControl:
    """Counts the lead optimizer's steps; freezes the model for the held-out steps; stops."""

    def __init__(self, steps: int, holdout: int, holdout_fix: Callable | None = None,
                 on_step: Callable[[int, int], None] | None = None,
                 freeze: Callable[[], list] | None = None) -> None:
        self.steps, self.holdout_steps = steps, holdout
        self._freeze = freeze                    # the modules to keep at step K (FrozenModules), if any
        self.frozen_modules: FrozenModules | None = None
        self._modules: dict[int, object] = {}    # every module assigned into another, and that other
        self.on_step = on_step                   # (steps done, steps in all), for progress
        self._make_holdout_fix = holdout_fix     # a fix that acts on the held-out steps only
        self.holdout_fix = None
        self.losses: list[torch.Tensor | float] = []
        self.lrs: list[float | None] = []        # the lead optimizer's first group's rate at each step
        self.holdout: list[torch.Tensor | float] = []
        self._loss: torch.Tensor | None = None
        self._lead = None
        self._saved: dict[int, list[torch.Tensor]] = {}
        self._patch = TensorBackwardPatch(self._on_backward)
        self._handles = []
        self._locator = SourceLocator()
        self.backward_site: tuple[str, int] | None = None
        self.module_sites: dict[int, tuple[str, int]] = {}

    def __enter__(self) -> "StepControl":
        self._patch.__enter__()
        self._handles = [register_optimizer_step_pre_hook(self._pre), register_optimizer_step_post_hook(self._post),
                         module_globals.register_module_module_registration_hook(self._on_module)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.holdout_fix is not None:
            self.holdout_fix.__exit__(*exc)
        if self.frozen_modules is not None:
            self.frozen_modules.__exit__(*exc)
        self._patch.__exit__(*exc)

    @property
    def frozen(self) -> bool:
        return len(self.losses) >= self.steps

    def _on_module(self, parent, name, module) -> None:
        """Where each submodule is assigned: the line that builds it, for diffs."""
        if module is not None and self._freeze is not None:
            self._modules.setdefault(id(parent), parent)
            self._modules.setdefault(id(module), module)
        if module is not None and id(module) not in self.module_sites:
            where = self._locator.locate()
            if where is not None:
                self.module_sites[id(module)] = (where[0], where[1])

    def _on_backward(self, original, tensor, args, kwargs):
        if self.backward_site is None:
            where = self._locator.locate()
            self.backward_site = (where[0], where[1]) if where is not None else None
        if self._loss is None and isinstance(tensor, torch.Tensor) and tensor.numel() == 1 \
                and tensor.is_floating_point():
            with torch.no_grad():
                self._loss = tensor.detach().reshape(()).float().clone()
        return original(tensor, *args, **kwargs)

    def _pre(self, optimizer, args, kwargs):
        if self.frozen and self._freeze is not None and self.frozen_modules is None:
            # NOTE: at the first held-out step, not at step K: the program's own writes that
            # end step K (a target network synced right after it) are part of the step-K state.
            self.frozen_modules = FrozenModules([*self._modules.values(), *self._freeze()])
            self.frozen_modules.__enter__()
        if self.frozen:
            with torch.no_grad():
                self._saved[id(optimizer)] = [p.detach().clone() for group in optimizer.param_groups
                                              for p in group["params"]]
        return None

    def _post(self, optimizer, args, kwargs) -> None:
        saved = self._saved.pop(id(optimizer), None)
        if saved is not None:
            with torch.no_grad():
                for p, value in zip((p for group in optimizer.param_groups for p in group["params"]), saved):
                    p.copy_(value)
            if self.frozen_modules is not None:
                self.frozen_modules.settle()
        if self._lead is None:
            self._lead = optimizer
        if optimizer is not self._lead:
            return
        loss, self._loss = self._loss, None
        value = loss if loss is not None else float("nan")
        (self.holdout if saved is not None else self.losses).append(value)
        if saved is None:
            rate = optimizer.param_groups[0].get("lr") if optimizer.param_groups else None
            self.lrs.append(float(rate) if isinstance(rate, (int, float)) else None)
        if self.on_step is not None:
            self.on_step(len(self.losses) + len(self.holdout), self.steps + self.holdout_steps)
        if self.frozen and self._make_holdout_fix is not None and self.holdout_fix is None:
            self.holdout_fix = self._make_holdout_fix()
            self.holdout_fix.__enter__()
        if len(self.holdout) >= self.holdout_steps and self.frozen:
            raise StopObserving()

    def results(self) -> tuple[list[float], list[float]]:
        def host(values):
            return [float(v) for v in values]
        return host(self.losses), host(self.holdout)


class FreshImports:
    """Forget, after the run, the modules the program imported from outside the Python
    installation and leaky (the user's own, beside the script), so that the next run imports
    them again, from its own folder: two copies of a project (`leaky diff --run old/train.py
    --run new/train.py`) each run their own `model.py`, and a module that seeds or builds
    something when imported does so again, as `python SCRIPT` would."""

    def __enter__(self) -> "FreshImports":
        self._before = set(sys.modules)
        return self

    def __exit__(self, *exc) -> None:
        import os
        import site
        import sysconfig

        kept = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                              sysconfig.get_paths().get("stdlib") or sys.prefix,
                                              os.path.dirname(os.path.dirname(__file__)))}
        kept |= {os.path.abspath(p) for p in site.getsitepackages() + [site.getusersitepackages()]}
        for name in set(sys.modules) - self._before:
            file = getattr(sys.modules.get(name), "__file__", None)
            if file and not any(os.path.abspath(file).startswith(root + os.sep) for root in kept):
                del sys.modules[name]


class SeedOffset:
    """Shift every seed the program sets by `offset`; seed the global generators first."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self._patches = contextlib.ExitStack()

    def __enter__(self) -> "SeedOffset":
        targets = [(torch, "manual_seed"), (torch.random, "manual_seed"), (random, "seed")]
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            targets.append((numpy.random, "seed"))
        for owner, name in targets:
            self._patches.enter_context(Patch(owner, name, self._shifted))
        torch.manual_seed(0)
        random.seed(0)
        if numpy is not None:
            numpy.random.seed(0)
        return self

    def _shifted(self, original: Callable) -> Callable:
        offset = self.offset

        def seed(value=None, *args, **kwargs):
            if isinstance(value, int) and offset:
                value = (value + offset) % (2 ** 32)
            return original(value, *args, **kwargs)
        seed.__wrapped__ = original
        return seed

    def __exit__(self, *exc) -> None:
        self._patches.close()


def run_trial(program: Callable[[], None], make_changes: Callable[[], Changes] | None, offset: int, steps: int,
              holdout: int, audit_steps: int, label: str | None = None, holdout_fix: Callable | None = None,
              on_step: Callable[[int, int], None] | None = None, freeze_modules: bool = False,
              fresh_imports: bool = False) -> Trial:
    """Run `program` once under a seed offset, optional `Changes`, an audit and the step control.
    `freeze_modules`: after step K, what the program writes into its modules outside the
    optimizer (a target network's sync) is undone too (`FrozenModules`). `fresh_imports`: the
    user's own modules it imported are forgotten after it (`FreshImports`)."""
    fix = make_changes() if make_changes is not None else None
    audit = Audit(config=AuditConfig(steps=min(audit_steps, steps)))
    seen = (lambda: [info.module for info in audit.recorder.modules.infos]) if freeze_modules else None
    control = StepControl(steps, holdout, holdout_fix, on_step, seen)
    output = io.StringIO()
    status, failure = "finished", None
    start = time.perf_counter()
    with (FreshImports() if fresh_imports else contextlib.nullcontext()), SeedOffset(offset), \
            (fix or contextlib.nullcontext()), control, audit, \
            (fix.outer() if fix else contextlib.nullcontext()):
        try:
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
                program()
        except StopObserving:
            status = "stopped"
        except SystemExit as exc:
            failure = failure_of(exc)
            status = "exited" if failure else "finished"
        except Exception as exc:   # the program's own failure: keep what ran
            status, failure = "failed", failure_of(exc)
    seconds = time.perf_counter() - start
    losses, held = control.results()
    tail = "\n".join(output.getvalue().splitlines()[-5:])
    return Trial(offset, label, losses, held, seconds, status, failure.summary if failure else None,
                 fix.applied if fix else [], audit.report, audit.stats, tail, control.backward_site,
                 control.module_sites, audit.recorder.modules, failure,
                 list(getattr(control.holdout_fix, "applied", None) or []), list(control.lrs))


def same_losses(a: Trial, b: Trial, held_out: bool = True) -> tuple[bool, str | None]:
    """Whether two runs from the same seeds gave the same losses, bit for bit (`held_out`:
    the held-out ones too), and where they differed if not."""
    for step, (x, y) in enumerate(zip(a.losses + (a.holdout if held_out else []),
                                      b.losses + (b.holdout if held_out else []))):
        if x != y and not (x != x and y != y):
            return False, f"step {step}: loss {x!r} in one run, {y!r} in the other"
    if len(a.losses) != len(b.losses) or len(a.holdout) != len(b.holdout):
        return False, f"one run made {a.steps} steps, the other {b.steps}"
    return True, None
