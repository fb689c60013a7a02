"""Which module calls are a model's own, and the small helpers every probe part shares.

A model call is a call of a module that owns parameters, made from outside every other such
module (a loss module owns none). `ModelCalls` is the base of every run-time part of the
probes (`replay`, `pairing`, `origins`): global forward hooks that hand each model call to
`on_model` and `after_model`, and step aside while leaky re-runs a model itself.
"""
from __future__ import annotations

import sys

import torch
from torch import nn
from torch.nn.modules import module as module_globals
from torch.optim.optimizer import register_optimizer_step_post_hook

from leaky.process.frames import user_frames
from leaky.process.modes import CallMode
from leaky.record.modules import remove_global_hook
from leaky.record.sites import SourceLocator


# NOTE: what a probe part reads about an op (its shapes, storage, values) is no op of the
# program. Run with the torch-function modes on, the parts below it (they are stacked) took
# each read for an op of the program and read it in turn: a storage check against a whole data
# set per row, when the program builds its data set row by row before training.
reading = torch._C.DisableTorchFunction


def _is_data(value) -> bool:
    return isinstance(value, torch.Tensor) and not value.requires_grad and not isinstance(value, nn.Parameter)


def _call_path() -> tuple[tuple[str, int], ...]:
    """The user's lines that led here, innermost first: two calls of one model from two lines
    (acting and training), also through one helper, are two places."""
    return tuple((frame.f_code.co_filename, frame.f_lineno) for frame in user_frames(sys._getframe(1)))


def _on_backward(tensors, mark) -> None:
    """Call `mark()` when a backward pass reaches any of `tensors` (a hook on the autograd node
    that made each: it fires even if the tensor is later changed in place). Reads nothing."""
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None:
            try:
                t.grad_fn.register_prehook(lambda grads: mark())
            except RuntimeError:
                continue


def _tensors(value):
    """The tensors of an argument list, one level into lists and tuples."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, torch.Tensor):
                yield item


class ModelCalls:
    """Global forward hooks that know which module calls are a model's own: a module that
    owns parameters, called from outside every other such module (a loss module owns none).
    Subclasses override `on_model(module, args) -> new args | None` and `after_model`."""

    # NOTE: entered before the audit, as leaky fix's parts are: the recorder's mode then sits
    # above this one and can step aside for the optimizer's step and for its own re-run of a
    # model (LK306's batch probe). A probe mode above it kept it on there, and the audit took
    # that re-run for the program's ops: LK105 on a feed-forward MLP, located at `opt.step()`.
    outer = False

    def __init__(self) -> None:
        self.depth = 0
        self.applied: list[str] = []
        self._owns: dict[int, bool] = {}
        self._handles = []
        self._pre_hooks = None

    @property
    def live(self) -> bool:
        """Whether the global module hooks are still the ones entered with. leaky's own re-run
        of a model (LK306's batch probe, record/rerun.py `untouched`) swaps them out for its
        duration: then which calls are a model's cannot be told, and every call is left alone
        (those ops are the observer's, never the program's batch)."""
        return module_globals._global_forward_pre_hooks is self._pre_hooks

    def __enter__(self):
        self._pre_hooks = module_globals._global_forward_pre_hooks
        self._handles = [module_globals.register_module_forward_pre_hook(self._pre),
                         module_globals.register_module_forward_hook(self._post, with_kwargs=True, always_call=True)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            remove_global_hook(handle)
        self._handles.clear()

    def owns(self, module: nn.Module) -> bool:
        known = self._owns.get(id(module))
        if known is None:
            known = self._owns[id(module)] = any(True for _ in module.parameters())
        return known

    def _pre(self, module, args):
        if not self.owns(module):
            return None
        self.depth += 1
        if self.depth == 1:
            return self.on_model(module, args)
        return None

    def _post(self, module, args, kwargs, output):
        if not self.owns(module):
            return None
        self.depth = max(0, self.depth - 1)
        if self.depth == 0:
            self.after_model(module, args, kwargs, output)
        return None

    def on_model(self, module, args):
        return None

    def after_model(self, module, args, kwargs, output) -> None:
        return None


class FirstStepCalls(ModelCalls):
    """Model calls, with every op handed to `_on_call(func, args, kwargs)` (a torch-function
    mode) and every optimizer step to `_on_step(optimizer, args, kwargs)`: what the probes
    that follow the first step's data (its batch, its targets, its rows) share."""

    def __init__(self) -> None:
        super().__init__()
        self._locator = SourceLocator()
        self._mode = CallMode(self._on_call)

    def __enter__(self):
        super().__enter__()
        self._handles.append(register_optimizer_step_post_hook(self._on_step))
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        super().__exit__(*exc)

    def _on_call(self, func, args, kwargs):
        raise NotImplementedError

    def _on_step(self, optimizer, args, kwargs) -> None:
        raise NotImplementedError
