"""Origins: the user's lines that built and drive what steers training.

An optimizer's learning rate, a scheduler's lr function, a `.half()` cast, an autocast
region, a `zero_grad()` call and a parameter's creation are not ops on the gradient path:
no torch-function mode or autograd hook sees them, yet they are where most fixes for the
training dynamics go (LK201-LK205, LK304). `OriginRecords` records each one's line while the
audit runs. It uses PyTorch's global parameter-registration hook and, where PyTorch has no
hook, wraps a method for the duration of the audit (`Optimizer.__init__`,
`Optimizer.zero_grad`, `LRScheduler.__init__` and `step`, `Module.__init__`,
`Module.zero_grad`, `Module._apply`, `autocast.__enter__`); every wrapper calls the
original first, unchanged, and all are restored on exit, also on errors. A scheduler's
`step()` calls are counted per line: where the user advances it, and how often (once per
batch or once per epoch), which no learning rate alone tells. Memory: one small record per optimizer,
scheduler, cast site, zero_grad site, and created module and parameter (capped).
"""
from __future__ import annotations

import dis
import inspect
import sys
import weakref
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.nn.modules import module as module_globals
from torch.optim import lr_scheduler

from leaky.process.frames import is_internal
from leaky.process.patch import Patch
from leaky.process.guards import outside_graphs
from leaky.record.sites import SourceLocator

LOW_PRECISION = (torch.float16, torch.bfloat16)
_MAX_MADE = 100_000       # created modules / parameters remembered at most (a script that builds layers in a loop)


@dataclass
class OptimizerOrigin:
    kind: str
    where: tuple | None               # the construction: where its learning rate was given
    order: int                        # creation order among everything this watch recorded
    lrs: tuple[float | None, ...]     # each param group's lr as constructed
    step_at: tuple | None = None      # where its step() is called
    cleared_steps: int = 0            # steps whose gradients a zero_grad() cleared between backward and step
    cleared_at: tuple | None = None
    lr_range: dict[int, tuple[float, float]] = field(default_factory=dict)   # group -> (low, high), sampled steps
    closure_calls: int = 0            # the most closure evaluations one step(closure) made (LBFGS: many)
    closure_calls_now: int = 0        # ... in the step under way

    def note_lrs(self, optimizer) -> None:
        for index, group in enumerate(optimizer.param_groups):
            lr = _float(group.get("lr"))
            if lr is not None:
                low, high = self.lr_range.get(index, (lr, lr))
                self.lr_range[index] = (min(low, lr), max(high, lr))


@dataclass
class SchedulerOrigin:
    kind: str
    where: tuple | None
    function_at: tuple | None         # LambdaLR & co: the line of the lr function that gives the factor
    optimizer: Any                    # weakref to its optimizer
    scheduler: Any = None             # weakref to the scheduler itself
    step_sites: dict[tuple, int] = field(default_factory=dict)   # (file, line) -> step() calls from there

    @property
    def step_at(self) -> tuple | None:
        """The line whose step() calls advanced it most (the batch loop's, when it is there too)."""
        return max(self.step_sites, key=self.step_sites.get) if self.step_sites else None

    @property
    def step_calls(self) -> int:
        return sum(self.step_sites.values())


@dataclass
class CastOrigin:
    kind: str                         # "module" (Module.half/.to(dtype)) | "autocast"
    dtype: str                        # "float16" | "bfloat16"
    where: tuple | None
    target: str                       # the module's class name, or the autocast device


@dataclass
class ZeroGradSite:
    where: tuple | None
    optimizer: Any                    # weakref when an optimizer's zero_grad() ran, else None
    params: frozenset[int]            # Module.zero_grad(): ids of the parameters it clears


class OriginRecords:
    """Context manager: records origins while active. `guard(fn, *args)` runs leaky's own
    bookkeeping so that its failure never reaches the user's code."""

    def __init__(self, locator: SourceLocator, guard: Callable[..., None],
                 on_zero_grad: Callable[[tuple], None] | None = None, quiet: Callable | None = None) -> None:
        """`quiet()`: a context in which a `zero_grad()` runs unobserved (its ~2 attribute
        calls per parameter, `p.grad` and `p.grad = None`, are not the model's ops)."""
        self.locator = locator
        self.guard = guard
        self.on_zero_grad = on_zero_grad
        self.quiet = quiet
        self.timed: Callable | None = None   # a watch's budget: timed(fn, *args) counts a zero_grad's note
        self.optimizers: dict[int, tuple[Any, OptimizerOrigin]] = {}
        self.schedulers: list[SchedulerOrigin] = []
        self.casts: dict[tuple, CastOrigin] = {}
        self.zero_grads: dict[tuple, ZeroGradSite] = {}
        self.params: dict[int, tuple[tuple | None, int]] = {}   # id(param) -> (where created, order)
        self.modules: dict[int, tuple[Any, tuple | None]] = {}  # id(module) -> (weakref, where constructed)
        self._order = 0
        self._patches = ExitStack()
        self._handles: list = []
        self._applying = False
        self._stepping = False

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "OriginRecords":
        try:
            self._install()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _install(self) -> None:
        watch = self
        self._handles.append(module_globals.register_module_parameter_registration_hook(
            outside_graphs(self._param_created)))

        def after(note, quiet=None, caller=False):
            """`note(obj)` after each call; `note(obj, the caller's frame)` with `caller`."""
            def make(original):
                def wrapper(obj, *args, **kwargs):
                    if quiet is None:
                        out = original(obj, *args, **kwargs)
                    else:
                        with quiet():
                            out = original(obj, *args, **kwargs)
                    noted = (obj, sys._getframe(1)) if caller else (obj,)
                    if watch.timed is None:
                        watch.guard(note, *noted)
                    else:
                        watch.timed(watch.guard, note, *noted)
                    return out
                wrapper.__wrapped__ = original
                wrapper.__doc__ = getattr(original, "__doc__", None)
                return wrapper
            return make

        patch = self._patches.enter_context
        patch(Patch(torch.optim.Optimizer, "__init__", after(self._optimizer_built)))
        patch(Patch(torch.optim.Optimizer, "zero_grad", after(self._zero_grad, self.quiet, caller=True)))
        patch(Patch(nn.Module, "zero_grad", after(self._zero_grad, self.quiet, caller=True)))
        patch(Patch(nn.Module, "__init__", after(self._module_built)))
        patch(Patch(lr_scheduler.LRScheduler, "__init__", after(self._scheduler_built)))
        if "__init__" in lr_scheduler.ReduceLROnPlateau.__dict__:   # does not call LRScheduler.__init__
            patch(Patch(lr_scheduler.ReduceLROnPlateau, "__init__", after(self._scheduler_built)))
        for kind in _stepping_schedulers():
            patch(Patch(kind, "step", self._wrap_scheduler_step))
        patch(Patch(torch.amp.autocast_mode.autocast, "__enter__", after(self._autocast)))
        patch(Patch(nn.Module, "_apply", self._wrap_apply))

    def __exit__(self, *exc) -> None:
        self._patches.close()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _next(self) -> int:
        self._order += 1
        return self._order

    # -- what is recorded ------------------------------------------------------------
    def _optimizer_built(self, optimizer) -> None:
        lrs = tuple(_float(group.get("lr")) for group in optimizer.param_groups)
        origin = OptimizerOrigin(type(optimizer).__name__, self.locator.locate(optimizer), self._next(), lrs)
        self.optimizers[id(optimizer)] = (weakref.ref(optimizer), origin)

    def _scheduler_built(self, scheduler) -> None:
        optimizer = getattr(scheduler, "optimizer", None)
        functions = getattr(scheduler, "lr_lambdas", None) or []
        origin = SchedulerOrigin(type(scheduler).__name__, self.locator.locate(scheduler),
                                 _function_line(functions[0]) if functions else None,
                                 weakref.ref(optimizer) if optimizer is not None else None, weakref.ref(scheduler))
        self.schedulers.append(origin)

    def _wrap_scheduler_step(self, original):
        watch = self

        def step(scheduler, *args, **kwargs):
            # NOTE: SequentialLR and ChainedScheduler step their children: only the user's call counts.
            if watch._stepping:
                return original(scheduler, *args, **kwargs)
            watch._stepping = True
            try:
                out = original(scheduler, *args, **kwargs)
            finally:
                watch._stepping = False
            if watch.timed is None:
                watch.guard(watch._scheduler_stepped, scheduler, sys._getframe(1))
            else:   # a watch's budget counts it: a scheduler is often stepped at every step
                watch.timed(watch.guard, watch._scheduler_stepped, scheduler, sys._getframe(1))
            return out

        step.__wrapped__ = original
        step.__doc__ = getattr(original, "__doc__", None)
        return step

    def _scheduler_stepped(self, scheduler, caller=None) -> None:
        # NOTE: the step a scheduler's own __init__ takes comes before it is recorded: not counted.
        origin = next((s for s in reversed(self.schedulers) if s.scheduler is not None and s.scheduler() is scheduler),
                      None)
        where = self.locator.locate(start=caller) if origin is not None else None
        if where is not None:
            key = (where[0], where[1])
            origin.step_sites[key] = origin.step_sites.get(key, 0) + 1

    def _autocast(self, ctx) -> None:
        dtype = getattr(ctx, "fast_dtype", None)
        if getattr(ctx, "_enabled", False) and dtype in LOW_PRECISION:
            where = self.locator.locate()
            key = ("autocast", where)
            if key not in self.casts:
                self.casts[key] = CastOrigin("autocast", str(dtype).split(".")[-1], where, str(ctx.device))

    def _zero_grad(self, target, caller=None) -> None:
        """A zero_grad() on an optimizer or a module returned (at every step: the place is
        looked for from its caller's frame up, with no frame of leaky's made)."""
        where = self.locator.locate(start=caller)
        key = (where, id(target))
        if key not in self.zero_grads:
            if isinstance(target, torch.optim.Optimizer):
                self.zero_grads[key] = ZeroGradSite(where, weakref.ref(target), frozenset())
            else:
                self.zero_grads[key] = ZeroGradSite(where, None, frozenset(id(p) for p in target.parameters()))
        if self.on_zero_grad is not None:
            self.on_zero_grad(key)

    def _param_created(self, module, name, param) -> None:
        if param is not None and len(self.params) < _MAX_MADE:
            self.params[id(param)] = (self.locator.locate(), self._next())

    def _module_built(self, module) -> None:
        if len(self.modules) < _MAX_MADE:
            self.modules[id(module)] = (weakref.ref(module), self.locator.locate(module))

    def _wrap_apply(self, original):
        watch = self

        def _apply(module, fn, *args, **kwargs):
            # NOTE: _apply recurses into the children; only the outermost call is the user's cast.
            if watch._applying:
                return original(module, fn, *args, **kwargs)
            watch._applying = True
            try:
                before = {id(p) for p in module.parameters() if p.dtype in LOW_PRECISION}
                out = original(module, fn, *args, **kwargs)
            finally:
                watch._applying = False
            watch.guard(watch._note_cast, module, before)
            return out

        _apply.__wrapped__ = original
        return _apply

    def _note_cast(self, module, before: set[int]) -> None:
        cast = [p for p in module.parameters() if p.dtype in LOW_PRECISION and id(p) not in before]
        if cast:
            where = self.locator.locate()
            key = ("module", where)
            if key not in self.casts:
                self.casts[key] = CastOrigin("module", str(cast[0].dtype).split(".")[-1], where, type(module).__name__)

    # -- what the recorder asks ------------------------------------------------------
    def optimizer(self, optimizer) -> OptimizerOrigin:
        """This optimizer's record (one without a known construction, when it was built
        before the audit started)."""
        entry = self.optimizers.get(id(optimizer))
        if entry is None or entry[0]() is not optimizer:
            lrs = tuple(_float(group.get("lr")) for group in optimizer.param_groups)
            entry = (weakref.ref(optimizer), OptimizerOrigin(type(optimizer).__name__, None, 0, lrs))
            self.optimizers[id(optimizer)] = entry
        return entry[1]

    def module_built_at(self, module) -> tuple | None:
        """Where this module was constructed, when that happened during the audit."""
        entry = self.modules.get(id(module))
        return entry[1] if entry is not None and entry[0]() is module else None

    def clears(self, key: tuple, optimizer, param_ids: set[int]) -> bool:
        """Whether the zero_grad() call recorded under `key` clears this optimizer's gradients."""
        site = self.zero_grads.get(key)
        if site is None:
            return False
        if site.optimizer is not None:
            return site.optimizer() is optimizer
        return not site.params.isdisjoint(param_ids)

    def scheduler_of(self, optimizer) -> SchedulerOrigin | None:
        """The last scheduler built on this optimizer (the one driving it)."""
        found = [s for s in self.schedulers if s.optimizer is not None and s.optimizer() is optimizer]
        return found[-1] if found else None

    def zero_grad_sites(self, optimizer, param_ids: set[int]) -> list[tuple]:
        return [site.where for key, site in self.zero_grads.items()
                if site.where is not None and self.clears(key, optimizer, param_ids)]


def _stepping_schedulers() -> list[type]:
    """The scheduler classes of torch that define their own step() (LRScheduler's is inherited
    by the rest)."""
    kinds = [getattr(lr_scheduler, name) for name in dir(lr_scheduler)]
    return [kind for kind in kinds if isinstance(kind, type) and "step" in kind.__dict__
            and issubclass(kind, (lr_scheduler.LRScheduler, lr_scheduler.ReduceLROnPlateau))]


def _float(value) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_cuda:
        return float(value)
    return None


def _function_line(fn) -> tuple | None:
    """The line of a user function that computes its value: its return statement when it
    has exactly one, else its `def` line."""
    try:
        code = inspect.unwrap(fn).__code__
    except (AttributeError, ValueError):
        code = getattr(getattr(fn, "__call__", None), "__code__", None)
    if code is None or is_internal(code.co_filename):
        return None
    lines, line = set(), code.co_firstlineno
    for ins in dis.get_instructions(code):
        positions = getattr(ins, "positions", None)
        if positions is not None and positions.lineno is not None:
            line = positions.lineno
        elif isinstance(ins.starts_line, int) and not isinstance(ins.starts_line, bool):
            line = ins.starts_line
        if ins.opname in ("RETURN_VALUE", "RETURN_CONST"):
            lines.add(line)
    return code.co_filename, (lines.pop() if len(lines) == 1 else code.co_firstlineno)


def bare_method_statement(where: tuple | None, method: str) -> tuple | None:
    """A statement that only names a method, `optimizer.step` without the call, in the
    function around `where` (a user line): such a line does nothing."""
    if where is None:
        return None
    import ast

    try:
        with open(where[0], encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return None
    scopes = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
              and node.lineno <= where[1] <= (node.end_lineno or node.lineno)]
    scope = min(scopes, key=lambda node: (node.end_lineno or node.lineno) - node.lineno) if scopes else tree
    bare = sorted(node.lineno for node in ast.walk(scope)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Attribute) and node.value.attr == method)
    return (where[0], bare[0]) if bare else None
