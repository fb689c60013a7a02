"""Warnings raised by the user's ops point at the user's code, not at leaky's.

Under leaky's torch-function mode every torch call runs from a frame of leaky's: a warning
that torch raises inside the op (a C++ warning, or a Python `warnings.warn(stacklevel=2)`
in torch.nn.functional) is attributed to `leaky/record/opmode.py`. It then looks like
leaky's problem, and it escapes the user's warning filters, which match on the module of
the code that called torch.

`WarningSource` fixes the attribution for the length of an audit: a warning attributed to
one of leaky's files is let through the filters once (an `always` filter for leaky's
modules, first in the list) and re-issued with `warnings.warn_explicit` at the first frame
outside leaky and torch's dispatch machinery (`torch/overrides.py`), with that frame's
module and registry, so the user's filters, `once` and `default` actions apply as they
would without leaky. Nothing is done per op: the cost is paid only when a warning is raised.
"""
from __future__ import annotations

import os
import sys
import warnings

from leaky.process.frames import is_leaky_file
from leaky.process.patch import Patch

# leaky's own modules, not its built-in examples (leaky.zoo), which are user code
_LEAKY_MODULES = r"(?!leaky\.zoo(\.|$))leaky(\..*)?$"


_WARNINGS_FILE = warnings.__file__


def _dispatch_file(filename: str) -> bool:
    return (is_leaky_file(filename) or filename == _WARNINGS_FILE
            or filename.endswith(os.path.join("torch", "overrides.py")))


def _outward(frame):
    """The first frame from `frame` outward that is not leaky's, the warnings module's or
    torch's torch-function dispatch."""
    while frame is not None and _dispatch_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _user_frame():
    """Where the warning would point without leaky (the stack is still there: showwarning
    runs inside the call that warned).

    NOTE: two cases. A warning raised by the op itself (C++) was attributed to the mode's
    frame: the frame that called into the mode is where it belongs. A torch Python function
    run inside the mode (F.mse_loss) that warns with stacklevel=2 meant its caller, but got
    the mode: the frame outside the function's outer call (the one that entered the mode)
    is where it belongs."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == _WARNINGS_FILE or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    if frame is None or is_leaky_file(frame.f_code.co_filename):
        return _outward(frame)
    inner = frame.f_code
    while frame is not None and not is_leaky_file(frame.f_code.co_filename):
        frame = frame.f_back
    outer = _outward(frame)
    if outer is not None and outer.f_code is inner:
        return _outward(outer.f_back)
    return outer


class WarningSource:
    """Context manager: warnings attributed to leaky's code are re-issued at the user's."""

    def __init__(self) -> None:
        self._patch = Patch(warnings, "showwarning", _reissuing, unless_replaced=True)
        self._filter = None

    def __enter__(self) -> "WarningSource":
        self._patch.__enter__()
        warnings.filterwarnings("always", module=_LEAKY_MODULES)
        self._filter = warnings.filters[0]
        return self

    def __exit__(self, *exc) -> None:
        self._patch.__exit__(*exc)
        if self._filter in warnings.filters:
            warnings.filters.remove(self._filter)
            warnings._filters_mutated()
        self._filter = None


def _reissuing(previous):
    """`warnings.showwarning` that re-issues a warning attributed to leaky's code at the user's."""
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if file is None and is_leaky_file(str(filename)):
            frame = _user_frame()
            if frame is not None:
                _reissue(message, category, frame)
                return
        previous(message, category, filename, lineno, file, line)
    return showwarning


def _reissue(message, category, frame) -> None:
    module_globals = frame.f_globals
    registry = module_globals.setdefault("__warningregistry__", {})
    text = message if isinstance(message, Warning) else str(message)
    warnings.warn_explicit(text, category, frame.f_code.co_filename, frame.f_lineno,
                           module_globals.get("__name__"), registry, module_globals)
