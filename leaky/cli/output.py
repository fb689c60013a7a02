"""What the commands print and how they end: the live step line, errors, machine output, the
script's own end (its traceback and exit status)."""
from __future__ import annotations

import sys

from rich.console import Console
from rich.live import Live
from rich.text import Text

from leaky.finding import Severity
from leaky.cli.parser import EXIT_FINDINGS, EXIT_OK, EXIT_UNUSABLE


class Progress:
    """A one-line live status on a terminal; silent otherwise. Script output stays readable."""

    def __init__(self, console: Console, total: int | None) -> None:
        self.console, self.total = console, total
        self.live = Live(Text("leaky: starting…"), console=console, transient=True, redirect_stdout=True,
                         redirect_stderr=True) if console.is_terminal and main_process() else None

    def __enter__(self):
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live:
            self.live.__exit__(*exc)

    def on_step(self, recorder, findings: int | None = None) -> None:
        if not self.live:
            return
        builder = recorder.builder
        total = f"/{self.total}" if self.total else ""
        found = f" · {findings} finding{'s' if findings != 1 else ''}" if findings is not None else ""
        last = builder.series[-1] if builder.series else None
        loss = f" · loss {last.loss:.4g}" if last is not None and last.loss is not None else ""
        norm = f" · grad norm {last.grad_norm:.3g}" if last is not None and last.grad_norm is not None else ""
        self.live.update(Text(f"leaky: step {max(builder.steps, recorder.step)}{total}{loss}{norm}{found}",
                              style="dim"))

    def print(self, renderable) -> None:
        """Above the live line on a terminal; plainly otherwise."""
        (self.live.console if self.live else self.console).print(renderable)


def live_progress(verb: str):
    """(status, progress, on_step) for a command that runs the program several times (`leaky
    fix`, `probe`, `diff`): `progress(text)` prints a dim line on stderr and names the run under
    way, `on_step(done, total)` updates a live status line on a terminal every 10 steps;
    `status` is the context manager that shows it (nothing off a terminal)."""
    import contextlib

    from leaky.report.terminal import people_console

    err = people_console(stderr=True)
    status = err.status(f"leaky {verb}: starting") if err.is_terminal else contextlib.nullcontext()
    current = {"text": ""}

    def progress(text: str) -> None:
        current["text"] = text
        err.print(Text(f"leaky {verb}: {text}", style="dim"))

    def on_step(done: int, total: int) -> None:
        if err.is_terminal and done % 10 == 0:
            status.update(f"leaky {verb}: {current['text']}: step {done}/{total}")

    return status, progress, on_step


def main_process() -> bool:
    """Under torchrun only rank 0 prints and writes."""
    from leaky.process.distributed import is_main

    return is_main()


def error(text: str) -> None:
    """One unwrapped line on stderr: scripts and people both read it."""
    print(f"leaky: {text}", file=sys.stderr)


def fails(report, fail_on: str) -> bool:
    if fail_on == "never":
        return False
    floor = Severity(fail_on).rank
    return any(f.severity.rank >= floor for f in report.findings)


def emit(text: str, path: str | None, what: str) -> bool:
    """Write to a file, or to stdout for None or '-'; a one-line error on failure."""
    if path in (None, "-"):
        sys.stdout.write(text + "\n")
        return True
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    except OSError as exc:
        error(f"cannot write the {what} to {path}: {exc.strerror}")
        return False
    return True


def write_json(report, path: str) -> bool:
    return emit(report.to_json(), path, "JSON report")


def write_formatted(report, fmt: str, path: str | None, script: str) -> bool:
    import os

    from leaky.report.sarif import to_sarif_json

    text = report.to_json() if fmt == "json" else to_sarif_json(report, os.path.dirname(os.path.abspath(script)))
    return emit(text, path, f"{fmt} output")


def exit_status(run, report, fail_on: str) -> int:
    """The script's own nonzero exit status wins; else 1 for findings at or above
    --fail-on; else 0."""
    if run.failure is not None:
        return run.failure.status
    return EXIT_FINDINGS if fails(report, fail_on) else EXIT_OK


def other_rank_status(run) -> int:
    """The exit status of a rank other than 0 under torchrun: the script's own, else 0. Rank 0
    reports the findings and its status says whether they fail; a rank that exited 1 for them
    first made torchrun stop rank 0 before it had written its report."""
    return run.failure.status if run.failure is not None else EXIT_OK


def nothing_observed(script: str, run, report, verb: str) -> int:
    """No backward pass: say why (the script failed, leaky failed, or it never called
    backward) and end with the script's own status when it failed."""
    if run.failure is not None:
        error(f"{script} {run.failure.said()} before its first backward pass; nothing to {verb}.")
        end_of_script(run)
        return run.failure.status
    if report.run.get("internal_error"):
        error(f"leaky stopped observing {script} after an internal error before its first step "
               f"({report.run['internal_error']}); nothing to {verb}. Please report this.")
        return EXIT_UNUSABLE
    if run.children_cpu_s:
        error(f"no backward pass ran in the process leaky observes; {script}'s child processes worked for "
              f"{run.children_cpu_s:.1f} s of CPU. leaky cannot see a model trained in processes the script "
              "starts itself (torch.multiprocessing: Hogwild's Process(target=train), mp.spawn): run it under "
              f"torchrun (`torchrun --nproc_per_node=N -m leaky {verb} {script}`) if it is distributed, or put "
              "`with leaky.audit() as audit:` around the training loop of the function each process runs, "
              f"then print(audit.report). Nothing to {verb}.")
        return EXIT_UNUSABLE
    error(f"no backward pass was observed in {script}; nothing to {verb}. Does the script call loss.backward()?")
    return EXIT_UNUSABLE


def closing_lines(console: Console, run, report) -> None:
    """After the report: leaky's own failure, and how the script ended if it failed."""
    if report.run.get("internal_error"):
        console.print(Text(f"leaky: observation stopped early on an internal error: {report.run['internal_error']}",
                           style="red"), soft_wrap=True)
    if run.failure is not None:
        console.print(Text(f"leaky: the script {run.failure.said()} after {report.run['steps']} steps; "
                           "the report covers the steps before it.", style="red"), soft_wrap=True)


def end_of_script(run) -> None:
    """What Python would have printed for the script's failure, if it failed: its
    traceback (or SystemExit's message), on stderr, after leaky's report."""
    from leaky.failure import print_failure

    if run.failure is not None:
        sys.stdout.flush()
        print_failure(run.failure, sys.stderr)


def write_html(path: str, report: dict, run: dict | None) -> bool:
    from leaky.report.html import render_html, write_html

    try:
        write_html(path, render_html(report, run))
    except OSError as exc:
        error(f"cannot write the HTML report to {path}: {exc.strerror}")
        return False
    return True
