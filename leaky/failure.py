"""The script's own failure, shown and ended as `python SCRIPT args` would.

Python prints an uncaught exception's traceback on stderr and exits 1; `sys.exit(3)` exits
3 silently; `sys.exit("message")` prints the message and exits 1; Ctrl-C prints the
traceback of its KeyboardInterrupt and the shell reports 130 (128 + SIGINT). Under `leaky
audit` the same script runs inside leaky's frames (the command, runpy, the recorder's
hooks and patches): `script_traceback` drops them, so the user reads the traceback that
`python SCRIPT` would have printed, chained exceptions included.
"""
from __future__ import annotations

import os
import re
import runpy
import sysconfig
import traceback
from dataclasses import dataclass

import torch

from leaky.process.frames import is_leaky_file

_RUNPY = os.path.abspath(runpy.__file__)
# The standard library and installed packages (torch among them): not the script's own code.
_LIBRARIES = tuple({os.path.join(sysconfig.get_paths()[key], "") for key in ("stdlib", "platstdlib", "purelib",
                                                                             "platlib")}
                   | {os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "")})
_OVERRIDES = os.path.abspath(torch.overrides.__file__)
# NOTE: on an uncaught KeyboardInterrupt Python ends itself by SIGINT, which a shell reports as
# 130 (128 + 2). leaky returns 130, as a number: it cannot kill itself in the middle of a report.
INTERRUPTED = 130
# Terminal control sequences: CSI (colours, `\x1b[1m`), OSC (titles, links), and two-byte escapes.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


@dataclass(frozen=True)
class ScriptFailure:
    """How the script ended when it did not succeed."""

    status: int      # the exit status Python gives the script: nonzero
    kind: str        # "raised" | "exited" | "interrupted"
    summary: str     # one line: `ValueError: bad batch (train.py:7)`
    text: str        # what Python prints on stderr: the traceback, SystemExit's message, or ""

    def said(self) -> str:
        """`raised ValueError: bad batch (train.py:7)`, `exited with status 3`, ..."""
        if self.kind == "exited":
            return f"exited with status {self.status}"
        if self.kind == "interrupted":
            return f"was interrupted: {self.summary}"
        return f"raised {self.summary}"


def failure_of(exc: BaseException) -> ScriptFailure | None:
    """The failure the exception ends the script with; None for `sys.exit(0)` / `sys.exit()`."""
    if isinstance(exc, SystemExit):
        return _exited(exc)
    if isinstance(exc, KeyboardInterrupt):
        return ScriptFailure(INTERRUPTED, "interrupted", describe_exception(exc), script_traceback(exc))
    return ScriptFailure(1, "raised", describe_exception(exc), script_traceback(exc))


def _exited(exc: SystemExit) -> ScriptFailure | None:
    code = exc.code
    if code is None:
        return None
    if isinstance(code, int):   # bool too, as in Python
        # NOTE: the OS keeps the low 8 bits: sys.exit(256) ends a POSIX process with status 0.
        status = code & 0xFF if os.name == "posix" else int(code)
        return ScriptFailure(status, "exited", describe_exception(exc), "") if status else None
    return ScriptFailure(1, "exited", describe_exception(exc), f"{code}\n")   # Python prints str(code)


def describe_exception(exc: BaseException) -> str:
    """`Type: first line of the message (file:line)`, at the innermost frame of the
    script's own code (not a library's: argparse's `sys.exit(2)` is placed at the script's
    `parse_args()`), with terminal escapes removed: one line for JSON, stores and reports."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_script_frame(f.filename)]
    own = [f for f in frames if not f.filename.startswith(_LIBRARIES)] or frames
    where = f" ({os.path.relpath(own[-1].filename)}:{own[-1].lineno})" if own else ""
    lines = strip_escapes(str(exc)).strip().splitlines()
    return type(exc).__name__ + (f": {lines[0].strip()}" if lines else "") + where


def script_traceback(exc: BaseException) -> str:
    """The traceback `python SCRIPT` prints for `exc`, without leaky's, runpy's and the
    import machinery's frames, chained and grouped exceptions included."""
    shown = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    _keep_script_frames(shown, set())
    return "".join(shown.format())


def _keep_script_frames(shown: traceback.TracebackException | None, seen: set[int]) -> None:
    if shown is None or id(shown) in seen:
        return
    seen.add(id(shown))
    shown.stack = traceback.StackSummary.from_list(_script_frames(list(shown.stack)))
    _keep_script_frames(shown.__cause__, seen)
    _keep_script_frames(shown.__context__, seen)
    for inner in getattr(shown, "exceptions", None) or ():
        _keep_script_frames(inner, seen)


def _script_frames(frames: list[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    """The frames `python SCRIPT` would show. Besides leaky's own, this drops the detour a
    torch function takes to reach leaky's function mode: the torch frame that calls
    `handle_torch_function`, and that frame in torch/overrides.py (without the mode, torch
    runs the function's body straight away, which is the frame after leaky's)."""
    detour = set()
    for index, frame in enumerate(frames):
        if frame.filename == _OVERRIDES and index + 1 < len(frames) and is_leaky_file(frames[index + 1].filename):
            detour.update((index - 1, index))
    return [f for i, f in enumerate(frames) if i not in detour and _is_script_frame(f.filename)]


def _is_script_frame(filename: str) -> bool:
    """A frame `python SCRIPT` would show too: not leaky's (its examples are), not runpy's,
    not the frozen import machinery's."""
    if filename.startswith("<"):
        return not filename.startswith(("<frozen importlib", "<frozen runpy"))
    return not is_leaky_file(filename) and os.path.abspath(filename) != _RUNPY


def strip_escapes(text: str) -> str:
    """The text without terminal control sequences (for a file, a pipe, or a one-line summary)."""
    return _ESCAPE.sub("", text)


def print_failure(failure: ScriptFailure, stream) -> None:
    """Write what Python would have printed; escapes kept only on a terminal."""
    if not failure.text:
        return
    text = failure.text if _is_terminal(stream) else strip_escapes(failure.text)
    stream.write(text)
    stream.flush()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


__all__ = ["INTERRUPTED", "ScriptFailure", "describe_exception", "failure_of", "print_failure",
           "script_traceback", "strip_escapes"]
