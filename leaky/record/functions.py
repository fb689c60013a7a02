"""Custom autograd.Functions: name their backward nodes, and re-check each one once.

`Function.apply` does not pass through torch-function modes, so this instrument wraps the
classmethod for the duration of the audit (restored on exit, also on errors). Functions
defined inside torch itself (checkpointing, say) are left alone.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.autograd.function import Function

from leaky.record.gradcheck import GradcheckResult, check_function
from leaky.record.opmode import _tensors

if TYPE_CHECKING:
    from leaky.record.recorder import Recorder


@dataclass
class FunctionCheck:
    name: str
    module: int | None
    where: tuple[str, int] | None       # the call
    result: GradcheckResult
    backward_at: tuple[str, int] | None = None   # where its backward is defined: where a fix goes


def _backward_location(cls) -> tuple[str, int] | None:
    try:
        backward = inspect.unwrap(cls.backward)
        lines, first = inspect.getsourcelines(backward)
    except (TypeError, OSError):
        return None
    offset = next((i for i, text in enumerate(lines) if text.lstrip().startswith("def ")), 0)
    return inspect.getsourcefile(backward), first + offset   # the def line, after decorators


def _user_function(cls) -> bool:
    return not cls.__module__.startswith("torch")


class FunctionWatch:
    """Context manager: while active, user Functions are attributed and checked."""

    def __init__(self, recorder: "Recorder") -> None:
        self.recorder = recorder
        self.checks: dict[type, FunctionCheck] = {}
        self._original = None
        self._busy = False

    def __enter__(self) -> "FunctionWatch":
        self._original = Function.__dict__["apply"]
        original, watch = self._original.__func__, self

        def apply(cls, *args, **kwargs):
            if watch._busy or not _user_function(cls) or not watch.recorder.observing:
                return original(cls, *args, **kwargs)
            if cls not in watch.checks and torch.is_grad_enabled():
                watch.recorder.guarded(watch._check, cls, original, args, kwargs)
            out = original(cls, *args, **kwargs)
            if torch.is_grad_enabled():
                watch.recorder.guarded(watch._attribute, cls, args, kwargs, out)
            return out

        Function.apply = classmethod(apply)
        return self

    def __exit__(self, *exc) -> None:
        if self._original is not None:
            Function.apply = self._original
            self._original = None

    def _attribute(self, cls, args, kwargs, out) -> None:
        outputs = _tensors(out)
        if outputs:
            self.recorder.on_op(cls.__name__, args, kwargs, outputs)

    def _check(self, cls, original, args, kwargs) -> None:
        if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return
        rec = self.recorder
        where, module = rec.locator.locate(), rec.modules.current
        self._busy = True
        try:
            # NOTE: check_function restores the random generators it re-seeds, so the user's
            # random streams (dropout after this call, say) are untouched.
            with torch._C.DisableTorchFunction():
                result = check_function(lambda *xs: original(cls, *xs, **kwargs), args)
        finally:
            self._busy = False
        self.checks[cls] = FunctionCheck(cls.__name__, module, where, result, _backward_location(cls))
