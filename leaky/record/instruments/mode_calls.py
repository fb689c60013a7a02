"""The script's calls of `nn.Module.train(mode)` and `.eval()`: which module it put in which
mode, from which line, at which step (issue 33: `leaky diff` tells two runs' setups apart).

`nn.Module.train` is patched while the recorder is entered (process/patch.py: put back on
exit, errors included). `eval()` is `train(False)`, and `train` calls itself on every child:
only the outermost call is noted, so a parent's `.eval()` is one call, not one per module.
A call is the user's when the first frame above it that is not a `train`/`eval` method of the
module itself (torch's `eval`, or a subclass's override calling `super().train(mode)`) is the
user's code; leaky's own mode switches (record/rerun.py) and torch's are not noted.
Cheap: `train()` is called a few times per run, and never inside a step's ops.
"""
from __future__ import annotations

import functools
import sys
import weakref
from dataclasses import dataclass
from types import FrameType

from torch import nn

from leaky.process.frames import is_internal
from leaky.process.patch import Patch
from leaky.record.instruments import InstrumentHost, instrument

MOST_CALLS = 64   # the first ones are kept


@dataclass(frozen=True)
class ModeCall:
    """One outermost call of `train(mode)` that the user's code made."""

    module: weakref.ref           # the module it was called on (derive names it from the run's module table)
    type_name: str                # its class name
    training: bool                # the mode it set: True for train(), False for eval()
    where: tuple[str, int]        # the user's line that called it
    step: int                     # the recorder's step index at the call


@instrument("mode_calls")
class ModeCalls:
    def __init__(self, host: InstrumentHost) -> None:
        self.host = host
        self.calls: list[ModeCall] = []
        self._depth = 0   # train() calls running: the children's calls run inside their parent's
        self._patch = Patch(nn.Module, "train", self._wrapped)

    def __enter__(self) -> "ModeCalls":
        self._patch.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._patch.__exit__(*exc)

    def part(self) -> tuple[ModeCall, ...]:
        return tuple(self.calls)

    def _wrapped(self, original):
        @functools.wraps(original)
        def train(module: nn.Module, mode: bool = True) -> nn.Module:
            caller = sys._getframe(1)
            self._depth += 1
            try:
                result = original(module, mode)
            finally:
                self._depth -= 1
            if self._depth == 0 and len(self.calls) < MOST_CALLS:
                self.host.guarded(self._note, module, mode, caller)
            return result

        return train

    def _note(self, module: nn.Module, mode: bool, caller: FrameType) -> None:
        where = _user_line(module, caller)
        if where is not None:
            self.calls.append(ModeCall(weakref.ref(module), type(module).__name__, bool(mode), where, self.host.step))


def _user_line(module: nn.Module, frame: FrameType | None) -> tuple[str, int] | None:
    """The line that called `train`/`eval` on `module`, when the user's code called it."""
    while frame is not None and _own_mode_method(frame, module):
        frame = frame.f_back
    if frame is None or is_internal(frame.f_code.co_filename):
        return None
    return frame.f_code.co_filename, frame.f_lineno


def _own_mode_method(frame: FrameType, module: nn.Module) -> bool:
    """A `train` or `eval` method of `module`'s class running on `module` itself (torch's `eval`,
    a subclass's override): not the script's own function that happens to be called `train`."""
    code = frame.f_code
    if code.co_name not in ("train", "eval") or not code.co_argcount:
        return False
    defined = any(getattr(vars(cls).get(code.co_name), "__code__", None) is code for cls in type(module).__mro__)
    return defined and frame.f_locals.get(code.co_varnames[0]) is module
