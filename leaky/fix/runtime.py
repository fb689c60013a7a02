"""Run-time fixes: change one thing in a running program without editing its files.

Each fix is the `Changes` of one re-run (`leaky/rerun/trial.py`) made of a few primitives,
each a context manager removed on exit:

- `ModuleEdit`: find a module by the dotted path leaky reported (resolved when its root
  model first runs forward, before any of its layers) and change it: swap its forward,
  re-initialise its weights, standardise its input.
- `OpAtLine`: a torch-function mode (leaky/process/modes.py CallMode) that replaces one op called from one source line
  (a clamp by a straight-through clamp, a softmax by the identity).
- `OptimizerEdit`: optimizer step hooks that scale the learning rate, clip the gradient
  norm, zero the gradients after each step, or add parameters that were left out.
- `LossScaling`: what a GradScaler does, from outside: scale the loss before backward,
  unscale the gradients before the step, skip a step whose gradients overflowed.
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import Callable

import torch
from torch import nn
from torch.nn.modules import module as module_globals
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from leaky.process.modes import CallMode
from leaky.process.patch import Patch
from leaky.record.modules import ModuleTracker
from leaky.record.monitor import TensorBackwardPatch
from leaky.record.sites import SourceLocator

Undo = Callable[[], None]


# -- modules ---------------------------------------------------------------------------
class ModuleEdit:
    """Apply `edit(module) -> undo` to the modules at these dotted paths, once each.

    Paths are the ones leaky reports: from the root's `named_modules()`, prefixed with the
    root's variable name when a program has several models. They are resolved by a
    tracker of the same naming rules as the recorder's, at the first forward of each root.
    """

    def __init__(self, paths: list[str], edit: Callable[[nn.Module, str], Undo | None], what: str) -> None:
        self.paths = list(paths)
        self.edit = edit
        self.what = what
        self.applied: list[str] = []
        self._tracker = ModuleTracker()
        self._done: set[str] = set()
        self._undo: list[Undo] = []
        self._handle = None
        self._roots: set[int] = set()

    def __enter__(self) -> "ModuleEdit":
        self._tracker.__enter__()
        self._handle = module_globals.register_module_forward_pre_hook(self._pre)
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._tracker.__exit__(*exc)
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def _pre(self, module: nn.Module, args) -> None:
        if id(module) in self._roots or len(self._done) == len(self.paths):
            return
        self._roots.add(id(module))
        for info in list(self._tracker.infos):
            names = {self._tracker.name(info.key), self._tracker.qualified(info.key), info.path}
            for path in self.paths:
                if path in names and path not in self._done:
                    self._done.add(path)
                    undo = self.edit(info.module, path)
                    if undo is not None:
                        self._undo.append(undo)
                    self.applied.append(f"{self.what} at {path}")


def swap_forward(function: Callable) -> Callable[[nn.Module, str], Undo]:
    """Replace a module's forward (e.g. a ReLU's) by `function(input)`."""
    def edit(module: nn.Module, path: str) -> Undo:
        module.forward = lambda x, *args, **kwargs: function(x)

        def undo() -> None:
            module.__dict__.pop("forward", None)
        return undo
    return edit


def swap_forward_of(make: Callable[[nn.Module], Callable]) -> Callable[[nn.Module, str], Undo]:
    """Replace a module's forward by `make(module)(input)` (when the new forward needs the
    module's own settings, e.g. an nn.Softmax's dim)."""
    def edit(module: nn.Module, path: str) -> Undo:
        return swap_forward(make(module))(module, path)
    return edit


def reinitialise(init: Callable[[torch.Tensor, torch.Generator], None], seed: int = 0,
                 names: tuple[str, ...] = ("weight",), zero_bias: bool = True) -> Callable[[nn.Module, str], None]:
    """Re-initialise a layer's weights in place (the optimizer keeps the same tensors).

    A private generator does the drawing, so the program's own random stream (its data
    order, its dropout masks) stays exactly as in the unfixed run.
    """
    def edit(module: nn.Module, path: str) -> None:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in module.named_parameters(recurse=False):
                if name.startswith(names) and param.dim() >= 2:
                    fresh = torch.empty(param.shape, dtype=torch.float32)
                    init(fresh, generator)
                    param.copy_(fresh.to(param.dtype))
                elif zero_bias and name.startswith("bias"):
                    param.zero_()
        return None
    return edit


def standardise_input(mean: list[float], std: list[float]) -> Callable[[nn.Module, str], Undo]:
    """A forward pre-hook: x -> (x - mean) / std over the layer's feature dimension."""
    def edit(module: nn.Module, path: str) -> Undo:
        feature_dim = 1 if isinstance(module, nn.modules.conv._ConvNd) else -1

        def pre(mod, args):
            x = args[0]
            shape = [1] * x.dim()
            shape[feature_dim] = len(mean)
            m = torch.tensor(mean, dtype=x.dtype, device=x.device).reshape(shape)
            s = torch.tensor(std, dtype=x.dtype, device=x.device).clamp_min(1e-8).reshape(shape)
            return ((x - m) / s, *args[1:])
        handle = module.register_forward_pre_hook(pre)
        return handle.remove
    return edit


# -- ops at a source line --------------------------------------------------------------
class OpAtLine(CallMode):
    """Replace the ops named `ops` when called from `file:line` by `replacement(func, args, kwargs)`."""

    def __init__(self, file: str, line: int, ops: set[str], replacement: Callable, what: str) -> None:
        super().__init__(self._call)
        self.file, self.line, self.ops = file, line, ops
        self.replacement = replacement
        self.what = what
        self.applied: list[str] = []
        self._locator = SourceLocator()

    def _call(self, func, args: tuple, kwargs: dict):
        name = getattr(func, "__name__", "")
        if name in self.ops:
            where = self._locator.locate()
            if where is not None and where[1] == self.line and where[0] == self.file:
                if not self.applied:
                    self.applied.append(f"{self.what} at {self.file}:{self.line}")
                return self.replacement(func, args, kwargs)
        return func(*args, **kwargs)


def straight_through(func, args, kwargs):
    """Forward: the op's value. Backward: the identity (`x + (op(x) - x).detach()`).

    NOTE: for a clamp this keeps the loss value and passes the gradient the clamp would
    have zeroed; for a squared error that is exactly the Huber loss's gradient, clipped
    to the clamp bounds instead of cut to 0.
    """
    x = args[0]
    value = func(*args, **kwargs)
    return x + (value - x).detach()


def identity(func, args, kwargs):
    return args[0]


# -- optimizers ------------------------------------------------------------------------
class OptimizerEdit:
    """Global optimizer step hooks: `before(optimizer)` and `after(optimizer)`."""

    def __init__(self, what: str, before: Callable | None = None, after: Callable | None = None) -> None:
        self.what = what
        self._before, self._after = before, after
        self._handles = []
        self.applied: list[str] = []

    def __enter__(self) -> "OptimizerEdit":
        if self._before is not None:
            self._handles.append(register_optimizer_step_pre_hook(self._pre))
        if self._after is not None:
            self._handles.append(register_optimizer_step_post_hook(self._post))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _note(self) -> None:
        if not self.applied:
            self.applied.append(self.what)

    def _pre(self, optimizer, args, kwargs):
        self._note()
        self._before(optimizer)
        return None

    def _post(self, optimizer, args, kwargs):
        self._note()
        self._after(optimizer)


def scaled_lr(factor: float) -> OptimizerEdit:
    """lr × factor for every param group, during the step only: schedulers see their own lr."""
    saved: dict[int, list[float]] = {}

    def before(optimizer):
        saved[id(optimizer)] = [group["lr"] for group in optimizer.param_groups]
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * factor

    def after(optimizer):
        for group, lr in zip(optimizer.param_groups, saved.pop(id(optimizer), [])):
            group["lr"] = lr
    return OptimizerEdit(f"learning rate × {factor:g}", before, after)


def scaled_update(find: Callable[[], list[nn.Parameter]], factor: float, what: str) -> OptimizerEdit:
    """The step's update of the parameters `find()` returns, × factor: w ← w₀ + factor·(w − w₀).

    NOTE: for a step linear in lr (SGD with or without momentum, Adam, AdamW, RMSprop,
    Adagrad: their buffers never read lr) that is exactly these parameters' lr × factor,
    without splitting a param group (which a scheduler built on the groups would not expect).
    """
    saved: dict[int, list[tuple[nn.Parameter, torch.Tensor]]] = {}

    def before(optimizer):
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        saved[id(optimizer)] = [(p, p.detach().clone()) for p in find() if id(p) in held]

    def after(optimizer):
        with torch.no_grad():
            for param, old in saved.pop(id(optimizer), []):
                param.copy_(torch.lerp(old, param, factor))
    return OptimizerEdit(what, before, after)


def clip_grad_norm(max_norm: float) -> OptimizerEdit:
    def before(optimizer):
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if params:
            torch.nn.utils.clip_grad_norm_(params, max_norm)
    return OptimizerEdit(f"gradient norm clipped at {max_norm:.3g}", before)


class SkipCallAtLine:
    """Make `owner.name(...)` a no-op when called from `file:line` (a misplaced zero_grad).

    Entered after the audit (`outer`), so the audit never sees the skipped call.
    """

    outer = True

    def __init__(self, owners: tuple, name: str, file: str, line: int, what: str) -> None:
        self.owners, self.name, self.file, self.line, self.what = owners, name, file, line, what
        self.applied: list[str] = []
        self._patches = ExitStack()
        self._locator = SourceLocator()

    def __enter__(self) -> "SkipCallAtLine":
        for owner in self.owners:
            self._patches.enter_context(Patch(owner, self.name, self._wrap))
        return self

    def _wrap(self, original):
        skip = self

        def wrapper(obj, *args, **kwargs):
            where = skip._locator.locate()
            if where is not None and where[1] == skip.line and where[0] == skip.file:
                if not skip.applied:
                    skip.applied.append(f"{skip.what} at {skip.file}:{skip.line}")
                return None
            return original(obj, *args, **kwargs)
        wrapper.__wrapped__ = original
        return wrapper

    def __exit__(self, *exc) -> None:
        self._patches.close()


def zero_grad_after_step() -> OptimizerEdit:
    return OptimizerEdit("gradients zeroed after every optimizer step", after=lambda opt: opt.zero_grad())


def add_missing_parameters(find: Callable[[], list[nn.Parameter]]) -> OptimizerEdit:
    """Before the first step, add the named parameters that no param group holds."""
    done: set[int] = set()

    def before(optimizer):
        if id(optimizer) in done:
            return
        done.add(id(optimizer))
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        missing = [p for p in find() if id(p) not in held]
        if missing:
            optimizer.add_param_group({"params": missing})
    return OptimizerEdit("missing parameters added to the optimizer", before)


class LossScaling:
    """Dynamic loss scaling from outside, the GradScaler recipe.

    backward() runs on loss × S; before each optimizer step the gradients are divided by S.
    A step whose gradients overflowed is skipped (every .grad set to None, which every
    torch optimizer skips) and S halves; after `interval` clean steps S doubles.
    """

    def __init__(self, scale: float = 2.0 ** 16, interval: int = 2000) -> None:
        self.scale, self.interval = scale, interval
        self._clean = 0
        self.applied: list[str] = []
        self._patch = TensorBackwardPatch(self._backward)
        self._hook = None

    def __enter__(self) -> "LossScaling":
        self._patch.__enter__()
        self._hook = register_optimizer_step_pre_hook(self._unscale)
        return self

    def __exit__(self, *exc) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._patch.__exit__(*exc)

    def _backward(self, original, tensor, args, kwargs):
        if tensor.numel() == 1 and tensor.is_floating_point() and not args and "gradient" not in kwargs:
            if not self.applied:
                self.applied.append(f"dynamic loss scaling from {self.scale:g}")
            return original(tensor.float() * self.scale, *args, **kwargs)
        return original(tensor, *args, **kwargs)

    def _unscale(self, optimizer, args, kwargs):
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        finite = True
        with torch.no_grad():
            for p in params:
                p.grad.div_(self.scale)
            if params:
                finite = bool(torch.stack([torch.isfinite(p.grad).all() for p in params]).all())
        if not finite:
            for p in params:
                p.grad = None
            self.scale /= 2
            self._clean = 0
        else:
            self._clean += 1
            if self._clean >= self.interval:
                self.scale, self._clean = self.scale * 2, 0
        return None


def orthogonal(gain: float = 1.0) -> Callable[[torch.Tensor, torch.Generator], None]:
    def init(tensor: torch.Tensor, generator: torch.Generator) -> None:
        nn.init.orthogonal_(tensor, gain=gain, generator=generator)
    return init


def kaiming(nonlinearity: str) -> Callable[[torch.Tensor, torch.Generator], None]:
    def init(tensor: torch.Tensor, generator: torch.Generator) -> None:
        nn.init.kaiming_normal_(tensor, nonlinearity=nonlinearity, generator=generator)
    return init


def xavier(nonlinearity: str) -> Callable[[torch.Tensor, torch.Generator], None]:
    """Xavier-normal with the gain of the nonlinearity that follows (an nn.init gain name)."""
    gain = nn.init.calculate_gain(nonlinearity)

    def init(tensor: torch.Tensor, generator: torch.Generator) -> None:
        nn.init.xavier_normal_(tensor, gain=gain, generator=generator)
    return init
