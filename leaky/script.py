"""Run a user's script unmodified, as `python SCRIPT args` would, under an audit.

The script runs as `__main__` with its own `sys.argv` and its directory first on
`sys.path`. After the configured number of steps leaky raises `StopObserving` (a
BaseException, so `except Exception` in the script does not swallow it) and reports.
However else the script ends (an exception, `sys.exit`, Ctrl-C) is kept as a
`ScriptFailure` (leaky/failure.py): the exit status and traceback Python would have given.
"""
from __future__ import annotations

import os
import runpy
import sys
from dataclasses import dataclass

from leaky.audit import Audit
from leaky.config import AuditConfig
from leaky.failure import ScriptFailure, failure_of
from leaky.process.frames import is_leaky_file
from leaky.record.recorder import StopObserving


class ScriptError(Exception):
    """The script could not be run at all: a one-line reason for the user."""


@dataclass
class ScriptRun:
    audit: Audit
    status: str                 # "finished" | "stopped" | "failed" | "interrupted" | "exited"
    error: str | None = None    # one line: the script's exception, if it raised or exited nonzero
    failure: ScriptFailure | None = None   # how it failed: Python's exit status and traceback
    children_cpu_s: float | None = None    # CPU seconds its ended child processes used (None: not known)

    @property
    def exit_status(self) -> int | None:
        """The status `python SCRIPT` would have ended with; None when leaky stopped it."""
        if self.status == "stopped":
            return None
        return self.failure.status if self.failure else 0


def check_script(path: str) -> str:
    """Compile the script so a missing file or a syntax error is a one-line error."""
    if not os.path.exists(path):
        raise ScriptError(f"cannot run {path}: no such file")
    if os.path.isdir(path):
        raise ScriptError(f"cannot run {path}: it is a directory, give the training script's .py file")
    try:
        with open(path, "rb") as handle:
            source = handle.read()
    except OSError as exc:
        raise ScriptError(f"cannot read {path}: {exc.strerror}") from None
    if b"\x00" in source[:4096]:
        raise ScriptError(f"cannot run {path}: it is not a Python source file")
    try:
        compile(source, path, "exec")
    except SyntaxError as exc:
        raise ScriptError(f"cannot run {path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:
        raise ScriptError(f"cannot run {path}: {exc}") from None
    return os.path.abspath(path)


def _ended(run: ScriptRun, exc: BaseException) -> None:
    run.failure = failure_of(exc)
    run.status = ("exited" if isinstance(exc, SystemExit) else
                  "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
    run.error = run.failure.summary if run.failure else None


def _raised_inside_leaky(exc: BaseException) -> bool:
    """Under LEAKY_STRICT=1 leaky's own errors propagate: its innermost frame is leaky's."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename if tb is not None else __file__
    return is_leaky_file(filename) and os.path.abspath(filename) != os.path.abspath(__file__)


def _stop() -> None:
    raise StopObserving()


def _children_cpu() -> float | None:
    """CPU seconds used so far by this process's ended and waited-for children (None where the
    OS does not say). NOTE: leaky observes its own process only: a script that trains in
    processes it starts itself (torch.multiprocessing: Hogwild, mp.spawn) shows here alone."""
    try:
        import resource
    except ImportError:
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_script(path: str, args: list[str], config: AuditConfig, on_step=None, make_audit=None) -> ScriptRun:
    """Run the script under `make_audit(script)` (default: an Audit of config.steps steps)."""
    script = check_script(path)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(script))
    try:
        audit = make_audit(script) if make_audit else Audit(config=config, on_limit=_stop, on_step=on_step)
    except Exception:
        sys.argv, sys.path[:] = saved_argv, saved_path
        raise
    run = ScriptRun(audit, "finished")
    children_before = _children_cpu()
    try:
        with audit:
            try:
                runpy.run_path(script, run_name="__main__")
            except StopObserving:
                run.status = "stopped"
            except BaseException as exc:  # the script's own end: report what was observed, then it
                if config.strict and _raised_inside_leaky(exc):
                    raise
                _ended(run, exc)
            audit.run_info.update({"script": script, "argv": list(args), "status": run.status,
                                   "error": run.error, "exit_status": run.exit_status})
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        children_after = _children_cpu()
        if children_before is not None and children_after is not None:
            run.children_cpu_s = children_after - children_before
    return run


def script_program(path: str, args: list[str]):
    """A callable that runs the script once, as `python SCRIPT args` would (for `leaky fix`,
    which runs it several times): argv and sys.path are set for each run and restored."""
    script = check_script(path)

    def program() -> None:
        saved_argv, saved_path = sys.argv[:], sys.path[:]
        sys.argv = [path, *args]
        sys.path.insert(0, os.path.dirname(script))
        try:
            runpy.run_path(script, run_name="__main__")
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path
    return program
