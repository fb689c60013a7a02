"""Running a model once more without changing anything: what leaky's one-time probes of a
model (LK306's batch probe) need around the extra forward and backward.

- `snapshot`: the call's inputs as they were (a loader may reuse its buffers);
- `batchnorm_in_eval`: batch norm in training mode normalises over the batch (by design);
  in eval mode, on its running statistics, it does not (the modes are put back);
- `buffers_kept`: every buffer copied back afterwards (running statistics);
- `untouched`: the user's hooks off, and what `forward` writes on its modules put back.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules import module as module_globals
from torch.nn.modules.batchnorm import _BatchNorm

from leaky.process.patch import Patch


def snapshot(value: Any, depth: int = 2) -> Any:
    """The call's inputs as they were: each tensor copied (a loader may reuse its buffers).

    NOTE: taken from inside a module hook while leaky's op mode runs: without the mode, so
    that leaky's own .detach() is not recorded as the user's cut (LK108 named the model's
    call line as a '.detach()' cutting the path)."""
    if isinstance(value, Tensor):
        with torch._C.DisableTorchFunction():
            return value.detach().clone()
    if depth and isinstance(value, dict) and type(value) is dict:
        return {k: snapshot(v, depth - 1) for k, v in value.items()}
    if depth and type(value) in (tuple, list):
        return type(value)(snapshot(v, depth - 1) for v in value)
    return value


@contextmanager
def batchnorm_in_eval(model: nn.Module):
    """Batch norm in training mode normalises over the batch: by design. Probe it in eval
    mode, on its running statistics (the modes are put back)."""
    switched = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.training
                and m.track_running_stats and m.running_mean is not None]
    for m in switched:
        m.train(False)
    try:
        yield switched
    finally:
        for m in switched:
            m.train(True)


@contextmanager
def buffers_kept(model: nn.Module):
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                # NOTE: through .data, which keeps the version counter: a graph of the user's
                # that saved this buffer (batch norm saves its running statistics) sees the
                # values it saw before the probe, and no in-place write.
                if buffer.shape == value.shape and not torch.equal(buffer, value):
                    buffer.data.copy_(value)


_HOOKS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
          "_forward_hooks_always_called", "_backward_pre_hooks", "_backward_hooks")
_GLOBAL_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_forward_hooks_with_kwargs",
                 "_global_forward_hooks_always_called", "_global_backward_pre_hooks", "_global_backward_hooks")
_INTERNAL = frozenset(_HOOKS) | {"_parameters", "_buffers", "_modules", "training", "_non_persistent_buffers_set",
                                 "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                                 "_load_state_dict_post_hooks", "_is_full_backward_hook"}


@contextmanager
def untouched(model: nn.Module):
    """The user's own hooks do not run (a hook that keeps the last activation would keep the
    probe's), and what `forward` writes on its modules is put back (a call counter, a cache,
    a list it appends to). Hooks that compute a weight (weight_norm, pruning) are off too:
    their last result stays in place, and the dependencies are the same."""
    modules = list(model.modules())
    state = [(m, {k: v for k, v in vars(m).items() if k not in _INTERNAL}) for m in modules]
    contents = [(v, list(v) if isinstance(v, list) else dict(v)) for _, attrs in state for v in attrs.values()
                if type(v) in (list, dict)]
    with ExitStack() as hooks_off:
        for owner, names in [(m, _HOOKS) for m in modules] + [(module_globals, _GLOBAL_HOOKS)]:
            for name in names:
                if name in vars(owner):
                    hooks_off.enter_context(Patch(owner, name, lambda hooks: type(hooks)()))
        try:
            yield
        finally:
            _put_back(state, contents)


def _put_back(state: list, contents: list) -> None:
    """What `forward` wrote on the modules, undone: attributes added, replaced, and the
    lists and dicts it changed in place."""
    for m, attrs in state:
        now = vars(m)
        for key in [k for k in now if k not in _INTERNAL and k not in attrs]:
            del now[key]
        for key, value in attrs.items():
            if now.get(key) is not value:
                now[key] = value
    for value, saved in contents:
        if isinstance(value, list):
            value[:] = saved
        else:
            value.clear()
            value.update(saved)
