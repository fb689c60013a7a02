"""Shared fixtures: deterministic torch, a CLI runner, and the zoo."""
from __future__ import annotations

import gc
import os
import sys

import pytest
import torch

os.environ.setdefault("LEAKY_STRICT", "1")   # leaky's own errors fail tests instead of warning


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


def no_leaky_left() -> list[str]:
    """Everything leaky may install while running; empty when it is all gone."""
    from torch.nn.modules import module as mod
    from torch.optim import optimizer as opt

    left = []
    if gc.get_freeze_count():
        left.append("objects frozen by gc.freeze()")
    if mod._global_forward_pre_hooks:
        left.append("global forward pre-hooks")
    if mod._global_forward_hooks:
        left.append("global forward hooks")
    if mod._global_forward_hooks_with_kwargs or mod._global_forward_hooks_always_called:
        left.append("global forward hook flags (with_kwargs, always_call)")
    if opt._global_optimizer_pre_hooks:
        left.append("optimizer pre-hooks")
    if opt._global_optimizer_post_hooks:
        left.append("optimizer post-hooks")
    if torch._C._len_torch_function_stack():
        left.append("torch function modes")
    if getattr(torch.Tensor.backward, "__wrapped__", None) is not None:
        left.append("Tensor.backward patch")
    if torch.autograd.Function.__dict__["apply"].__func__.__qualname__ != "Function.apply":
        left.append("Function.apply patch")
    if mod._global_parameter_registration_hooks:
        left.append("parameter registration hooks")
    for (owner, name), original in _ORIGINALS.items():
        if owner.__dict__.get(name) is not original and not _torchs_own(owner.__dict__.get(name)):
            left.append(f"{owner.__name__}.{name} patch")
    if _leakys(torch.compile):   # (Lightning wraps torch.compile at import: compare with leaky's own)
        left.append("torch.compile patch")
    if "torch._dynamo.eval_frame" in sys.modules and _leakys(sys.modules["torch._dynamo.eval_frame"].OptimizedModule.__call__):
        left.append("OptimizedModule.__call__ patch")
    return left


# The methods record/origins.py (and record/instruments/replicas.py: DDP's; record/replay.py: a watch's) wraps while an audit runs, as torch defines them.
_ORIGINALS = {(owner, name): owner.__dict__[name] for owner, name in [
    (torch.optim.Optimizer, "__init__"), (torch.optim.Optimizer, "zero_grad"), (torch.nn.Module, "__init__"),
    (torch.nn.Module, "zero_grad"), (torch.nn.Module, "_apply"), (torch.optim.lr_scheduler.LRScheduler, "__init__"),
    (torch.optim.lr_scheduler.ReduceLROnPlateau, "__init__"), (torch.amp.autocast_mode.autocast, "__enter__"),
    (torch.nn.parallel.DistributedDataParallel, "__init__"), (torch.nn.parallel.DistributedDataParallel, "forward"),
    (torch.nn.Module, "__getstate__"), (torch.jit, "script")]}   # record/replay.py: roots' state and scripts without its hook


def _leakys(fn) -> bool:
    """A wrapper made by record/compiled.py."""
    from leaky.record import compiled
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename == compiled.__file__


def _torchs_own(fn) -> bool:
    """A patch torch itself made (Dynamo wraps Module.__init__ when it first runs)."""
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename.startswith(os.path.dirname(torch.__file__))


def pytest_configure(config):
    # Two shared cores: more torch threads than free cores make steps swing wildly.
    torch.set_num_threads(1)
