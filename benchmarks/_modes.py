"""The modes the overhead benchmarks time a training step under, one runner each, and the
peers they are compared with (Cockpit's economy loop, naive `.item()` logging). A worker
process of benchmarks/_harness.py drives one runner:

    runner = make_runner("watch-every-1", "cnn", options)   # audit_overhead.py's workload, seeded
    runner.setup()
    heavy = runner.step()          # the heavy events in the step (a sampled step); 0: a light one
    info = runner.close()          # what it recorded, for the notes

  plain, plain-b        zero_grad, forward, loss, backward, optimizer step (audit_overhead.py)
  audit                 leaky.audit(steps=None), entered and left around each timed block
  audit-run             leaky.audit(steps=20), `leaky audit`'s default, around a block of its 20
                        steps; its exit builds the report
  audit-held            leaky.audit(steps=None), open from set-up to close: every timed step is a
                        steady-state audited step (none is an audit's first)
  anomaly               torch.autograd.detect_anomaly(), the same
  naive-item            after backward, log[name] = p.grad.norm().item() for every parameter
  watch-default         leaky.watch(every=DEFAULT_EVERY, store=<file in store_dir>), open from
                        set-up to close; a step is heavy when it was sampled
  watch-every-1         leaky.watch(every=1, ...), the same
  cockpit, cockpit-economy   Cockpit (cockpit-for-pytorch) with configuration("economy"),
                        tracked every step (overhead.py's and watch_overhead.py's names)
  cockpit-economy-16    the same quantities on a 16-step schedule; a step is heavy when any
                        quantity computes at it
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import statistics
import sys
import time
import traceback
import types
from functools import partial

import torch
from torch import nn

import leaky
from leaky.config import AuditConfig
from leaky.watch import DEFAULT_EVERY

from _harness import Skip, WorkerOptions
from audit_overhead import BUILDERS, Workload
from standins import STANDINS

# -- the peers -------------------------------------------------------------------------------
# Cockpit needs module losses (extended by BackPACK) and the per-sample losses.
COCKPIT_LOSSES = {"mlp": nn.CrossEntropyLoss, "cnn": nn.CrossEntropyLoss, "lstm": nn.MSELoss,
                  "transformer": nn.CrossEntropyLoss}


def import_cockpit():
    """(backpack, cockpit, schedules, configuration, note), or raise ImportError."""
    note = ""
    try:
        import cockpit  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "pkg_resources":
            raise
        # cockpit/__init__.py reads its version through pkg_resources and nothing else.
        stub = types.ModuleType("pkg_resources")

        class DistributionNotFound(Exception):
            pass

        def get_distribution(name):
            raise DistributionNotFound(name)

        stub.DistributionNotFound, stub.get_distribution = DistributionNotFound, get_distribution
        sys.modules["pkg_resources"] = stub
        sys.modules.pop("cockpit", None)
        import cockpit  # noqa: F401
        note = "cockpit imported with a stub for pkg_resources (missing from this setuptools)"
    import backpack
    from cockpit.utils import schedules
    from cockpit.utils.configuration import configuration
    return backpack, cockpit, schedules, configuration, note


def cockpit_status() -> tuple[bool, str]:
    """(True, a note or "") when Cockpit imports here; else (False, why). Importing it here,
    before the workers are forked, also spares each worker the import."""
    missing = [pkg for pkg in ("cockpit", "backpack") if importlib.util.find_spec(pkg) is None]
    if missing:
        return False, f"{' and '.join(missing)} not found; pip install cockpit-for-pytorch backpack-for-pytorch"
    try:
        return True, import_cockpit()[4]
    except Exception as exc:     # broken
        return False, f"importing Cockpit failed: {type(exc).__name__}: {exc}"


def unsupported(model: nn.Module, extensions) -> list[str]:
    """Modules holding parameters directly that a BackPACK extension has no rule for."""
    found = []
    for _, module in model.named_modules():
        own = [n for n, p in module.named_parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        for ext in extensions:
            table = getattr(ext, "_BackpropExtension__module_extensions", None)
            if table is not None and type(module) not in table:
                label = type(module).__name__ + (" (a bare nn.Parameter)" if list(module.children()) else "")
                if label not in found:
                    found.append(label)
                break
    return found


class CockpitLoop:
    """Cockpit's documented loop: extend() model and loss, per-sample losses with
    reduction="none", `with cockpit(global_step, info=...)` around backward; the economy
    quantities tracked every `interval` steps."""

    def __init__(self, work, model_name: str, interval: int, max_gb: float) -> None:
        backpack, cockpit, schedules, configuration, _ = import_cockpit()
        if model_name not in COCKPIT_LOSSES:
            raise Skip(f"no Cockpit loss set up for model {model_name}")
        n_params = sum(p.numel() for p in work.model.parameters() if p.requires_grad)
        gb = work.inputs.shape[0] * n_params * 4 / 2**30
        if gb > max_gb:
            raise Skip(f"per-sample gradients: batch {work.inputs.shape[0]} x {n_params / 1e6:.2f}M parameters = "
                       f"{gb:.1f} GB, over --cockpit-max-gb {max_gb:g}")
        self.work = work
        self.cockpit = cockpit.Cockpit(work.model.parameters(), quantities=configuration(
            "economy", track_schedule=schedules.linear(interval=interval)))
        missing = unsupported(work.model, self.cockpit._get_extensions(0))
        if missing:
            raise Skip(f"BackPACK does not support {', '.join(missing)}")
        self.model = backpack.extend(work.model)
        self.loss_fn = backpack.extend(COCKPIT_LOSSES[model_name]())
        self.individual_loss_fn = COCKPIT_LOSSES[model_name](reduction="none")
        self.global_step = 0

    def step(self) -> int:
        """One training step; returns the step's index."""
        w, cp, step = self.work, self.cockpit, self.global_step
        w.opt.zero_grad(set_to_none=True)
        out = self.model(w.inputs)
        loss = self.loss_fn(out, w.targets)
        losses = self.individual_loss_fn(out, w.targets).detach()
        with cp(step, info={"batch_size": w.inputs.shape[0], "individual_losses": losses, "loss": loss,
                            "optimizer": w.opt}):
            loss.backward(create_graph=cp.create_graph(step))
        w.opt.step()
        self.global_step += 1
        return step

    def heavy(self, step: int) -> bool:
        """Whether any quantity computes at this step (a tracked step s also makes Alpha,
        Distance and UpdateSize work at s + 1)."""
        return any(q.should_compute(step) for q in self.cockpit.quantities)


def naive_step(work, log: dict[str, float]) -> None:
    """A training step that logs every parameter's gradient norm with `.item()` (a host sync each)."""
    work.opt.zero_grad(set_to_none=True)
    loss = work.loss_fn(work.model(work.inputs), work.targets)
    loss.backward()
    for name, p in work.model.named_parameters():
        if p.grad is not None:
            log[name] = p.grad.norm().item()
    work.opt.step()


# -- the runners ------------------------------------------------------------------------------
class Runner:
    """Plain training; the subclasses add what they measure."""
    heavy_fraction = 0.0      # share of heavy steps (sampled, tracked) in a long run

    def __init__(self, work: Workload, model: str, options: WorkerOptions) -> None:
        self.work, self.model, self.options = work, model, options
        self.info: dict = {}

    def setup(self) -> None:
        pass

    def step(self) -> int:
        self.work.step()
        return 0

    def context(self) -> contextlib.AbstractContextManager:
        """Entered around each timed block."""
        return contextlib.nullcontext()

    def after_block(self, context) -> None:
        pass

    def close(self) -> dict:
        return self.info


class AuditRunner(Runner):
    def context(self):
        return leaky.audit(steps=None)     # exit only: the lazy report is never built here

    def after_block(self, audit) -> None:
        self.info["ops"] = len(audit.recorder.sites.sites)
        self.info["steps_recorded"] = getattr(getattr(audit, "stats", None), "steps", None)
        if audit.recorder.error and "error" not in self.info:
            self.info["error"] = audit.recorder.error


class AuditRunRunner(AuditRunner):
    """An audit of AuditConfig.steps steps (`leaky audit`'s default --steps) around a block of
    that many steps; its exit builds the report too (every check), as `leaky audit` does."""

    def context(self):
        return _Reported(leaky.audit(steps=AuditConfig().steps))


class _Reported:
    """An audit whose exit also builds its report (the audit's own report is made lazily)."""

    def __init__(self, audit) -> None:
        self.audit = audit
        self.recorder = audit.recorder

    def __enter__(self):
        self.audit.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.audit.__exit__(*exc)
        self.stats = getattr(self.audit, "stats", None)
        self.audit.report   # noqa: B018  (built now, inside the timed exit)


class HeldAuditRunner(Runner):
    """One `leaky.audit(steps=None)` open from setup to close: each step recorded in full."""

    def setup(self) -> None:
        self.audit = leaky.audit(steps=None).__enter__()

    def close(self) -> dict:
        start = time.perf_counter()
        self.audit.__exit__(None, None, None)
        return {"exit_s": time.perf_counter() - start, "ops": len(self.audit.recorder.sites.sites),
                "steps": self.audit.recorder.step, "error": self.audit.recorder.error}


class AnomalyRunner(Runner):
    def context(self):
        return torch.autograd.detect_anomaly()


class NaiveRunner(Runner):
    """Per-parameter gradient norms copied to the host one by one, after every backward."""

    def __init__(self, *a) -> None:
        super().__init__(*a)
        self.log: dict[str, float] = {}

    def step(self) -> int:
        naive_step(self.work, self.log)
        return 0


class WatchRunner(Runner):
    """One `leaky.watch` open from setup to close; a step is heavy when it was sampled."""

    def __init__(self, work: Workload, model: str, options: WorkerOptions, every: int) -> None:
        super().__init__(work, model, options)
        self.every = every
        self.heavy_fraction = 1 / every
        self.store = os.path.join(options.store_dir, f"{model}-every{every}.db") if options.store_dir else None
        self.run = None

    def setup(self) -> None:
        self.run = leaky.watch(every=self.every, store=self.store).__enter__()

    def step(self) -> int:
        before = self.run.recorder.steps_done     # count of sampled (folded) steps
        self.work.step()
        return self.run.recorder.steps_done - before

    def close(self) -> dict:
        start = time.perf_counter()
        self.run.__exit__(None, None, None)
        info = {"exit_s": time.perf_counter() - start, "steps": self.run.recorder.step,
                "sampled": getattr(getattr(self.run, "stats", None), "steps", None),
                "error": self.run.recorder.error}
        try:
            info["findings"] = sorted({f.code for f in self.run.findings})
        except Exception:
            info["findings_error"] = traceback.format_exc()
        if self.store:
            try:
                info["store"] = self._stored()
            except Exception:
                info["store_error"] = traceback.format_exc()
        return info

    def _stored(self) -> dict:
        """What the run left in its store."""
        from leaky.store import Store
        with Store(self.store) as store:
            run_id = self.run.run_id
            return {"status": store.run(run_id).get("status"), "steps": len(store.steps(run_id)),
                    "module_stat_steps": len({r["step"] for r in store.module_stats(run_id)}),
                    "findings": len(store.findings(run_id))}


def close_problems(info: dict) -> str:
    """"; key: last line" for each traceback a mode's close recorded, for the notes."""
    return "".join(f"; {key}: {info[key].strip().splitlines()[-1]}"
                   for key in ("findings_error", "store_error", "close_error") if info.get(key))


class CockpitRunner(Runner):
    """Cockpit's economy configuration (CockpitLoop): every step (interval None) or every
    `interval` steps, when a step is heavy if any quantity computes at it."""

    def __init__(self, work: Workload, model: str, options: WorkerOptions, interval: int | None) -> None:
        super().__init__(work, model, options)
        self.interval = interval

    def setup(self) -> None:
        self.loop = CockpitLoop(self.work, self.model, self.interval or 1, self.options.cockpit_max_gb)
        self.heavy_fraction = statistics.mean(self.loop.heavy(s) for s in range(16, 16 + 64 * 16))

    def step(self) -> int:
        step = self.loop.step()
        return int(self.interval is not None and self.loop.heavy(step))

    def close(self) -> dict:
        return {"tracked": len(self.loop.cockpit.get_output())}


RUNNERS = {
    "plain": Runner,
    "plain-b": Runner,
    "audit": AuditRunner,
    "audit-run": AuditRunRunner,
    "audit-held": HeldAuditRunner,
    "anomaly": AnomalyRunner,
    "naive-item": NaiveRunner,
    "watch-default": partial(WatchRunner, every=DEFAULT_EVERY),
    "watch-every-1": partial(WatchRunner, every=1),
    "cockpit": partial(CockpitRunner, interval=None),
    "cockpit-economy": partial(CockpitRunner, interval=None),
    "cockpit-economy-16": partial(CockpitRunner, interval=16),
}


def make_runner(mode: str, model: str, options: WorkerOptions) -> Runner:
    """The runner of `mode` on a fresh, seeded copy of `model`: one of audit_overhead.py's, or
    a stand-in for a public program (standins.py)."""
    torch.manual_seed(options.seed)
    return RUNNERS[mode]((BUILDERS.get(model) or STANDINS[model])(options.quick), model, options)
