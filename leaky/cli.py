"""The `leaky` command: audit, watch, runs, show, explain, demo.

    leaky audit [--steps N] [--json PATH] [--fail-on error] SCRIPT [script args...]
    leaky watch [--every N] [--store PATH] [--fail-fast] [--json PATH] SCRIPT [script args...]
    leaky runs [--store PATH]
    leaky show RUN [--store PATH]
    leaky fix [--steps K] [--holdout H] [--repeats R] [--json PATH] SCRIPT [script args...]
    leaky explain dead-zone | LK106
    leaky demo

Exit codes of `audit`: 0 no finding at or above --fail-on; 1 there are such findings;
2 the script could not be run, or no backward pass was observed.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys

from rich.console import Console
from rich.live import Live
from rich.text import Text

from leaky.config import AuditConfig
from leaky.finding import Severity

EXIT_OK, EXIT_FINDINGS, EXIT_UNUSABLE = 0, 1, 2
_FAIL_ON = ("error", "warning", "info", "never")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("expected a positive number")
    return value


def _steps(text: str) -> int | None:
    if text in ("all", "0"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps takes a positive number or 'all', not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("--steps must be positive (or 'all')")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leaky", description="Find where backprop leaks in PyTorch training.")
    sub = parser.add_subparsers(dest="command", required=True)
    audit = sub.add_parser("audit", help="run a training script under instrumentation and report leaks")
    audit.add_argument("--steps", type=_steps, default=20, metavar="N",
                       help="optimizer steps to observe (backward calls if no optimizer); 'all' for the whole "
                            "script (default 20)")
    audit.add_argument("--json", metavar="PATH", help="write the leaky/report-v1 JSON report here ('-': stdout)")
    audit.add_argument("--fail-on", choices=_FAIL_ON, default="error",
                       help="exit 1 when a finding at or above this severity exists (default error)")
    audit.add_argument("--no-table", action="store_true", help="leave out the gradient-flow table")
    audit.add_argument("--format", choices=("text", "json", "sarif"), default="text",
                       help="text (default) for people; json or sarif on stdout, or into --output")
    audit.add_argument("--output", metavar="PATH", help="write the --format json/sarif output here")
    audit.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report here")
    audit.add_argument("script", help="the training script, run as `python SCRIPT args...` would")
    audit.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    watch = sub.add_parser("watch", help="follow a whole training run cheaply and keep it in a store")
    watch.add_argument("--every", type=_positive, default=None, metavar="N",
                       help="observe every N-th step in detail (default 100)")
    watch.add_argument("--store", metavar="PATH", default="leaky-runs.db",
                       help="SQLite run store (default ./leaky-runs.db)")
    watch.add_argument("--fail-fast", action="store_true",
                       help="stop training at the first error-severity finding (exit 1)")
    watch.add_argument("--json", metavar="PATH", help="write the leaky/report-v1 JSON report at the end")
    watch.add_argument("--fail-on", choices=_FAIL_ON, default="error",
                       help="exit 1 when a finding at or above this severity exists (default error)")
    watch.add_argument("--no-table", action="store_true", help="leave out the gradient-flow table")
    watch.add_argument("--tensorboard", metavar="DIR", help="also write TensorBoard events to this log dir")
    watch.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report here")
    watch.add_argument("script", help="the training script, run as `python SCRIPT args...` would")
    watch.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    runs = sub.add_parser("runs", help="list the runs in a store")
    runs.add_argument("--store", metavar="PATH", default="leaky-runs.db")
    report = sub.add_parser("report", help="write a stored run's HTML report")
    report.add_argument("run", nargs="?", default="latest", help="run id, or 'latest' (default)")
    report.add_argument("--store", metavar="PATH", default="leaky-runs.db")
    report.add_argument("--html", metavar="PATH", required=True, help="where to write the HTML report")
    show = sub.add_parser("show", help="a stored run's findings and timeline")
    show.add_argument("run", nargs="?", default="latest", help="run id, or 'latest' (default)")
    show.add_argument("--store", metavar="PATH", default="leaky-runs.db")
    fix = sub.add_parser("fix", help="try the fix for each finding as a short run from the same start, and judge it")
    fix.add_argument("--steps", type=_positive, default=200, metavar="K",
                     help="training steps of each run (default 200)")
    fix.add_argument("--holdout", type=_positive, default=20, metavar="H",
                     help="held-out steps after step K, the model frozen, that score each run (default 20)")
    fix.add_argument("--repeats", type=_positive, default=2, metavar="R",
                     help="unfixed runs with shifted seeds that measure the noise (default 2)")
    fix.add_argument("--json", metavar="PATH", help="write the leaky/fix-v1 JSON result here ('-': stdout)")
    fix.add_argument("--example", metavar="NAME", help="a built-in example instead of a script (see leaky demo)")
    fix.add_argument("script", nargs="?", help="the training script, run as `python SCRIPT args...` would")
    fix.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    explain = sub.add_parser("explain", help="print what a check means and how to fix it")
    explain.add_argument("check", nargs="?", help="a check name (dead-zone) or code (LK106); none lists all")
    demo = sub.add_parser("demo", help="audit the built-in broken models next to their fixes")
    demo.add_argument("--steps", type=_steps, default=20, metavar="N", help="steps per example (default 20)")
    demo.add_argument("--only", metavar="NAME", help="run one example pair (e.g. dqn-clamped-td)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"audit": cmd_audit, "watch": cmd_watch, "runs": cmd_runs, "show": cmd_show, "report": cmd_report,
               "explain": cmd_explain, "demo": cmd_demo, "fix": cmd_fix}[args.command]
    return handler(args)


# -- audit ------------------------------------------------------------------------------
class _Progress:
    """A one-line live status on a terminal; silent otherwise. Script output stays readable."""

    def __init__(self, console: Console, total: int | None) -> None:
        self.console, self.total = console, total
        self.live = Live(Text("leaky: starting…"), console=console, transient=True, redirect_stdout=True,
                         redirect_stderr=True) if console.is_terminal and _main_process() else None

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
        last = builder.series[-1] if builder.series else (None, None, None, None)
        loss = f" · loss {last[1]:.4g}" if last[1] is not None else ""
        norm = f" · grad norm {last[2]:.3g}" if last[2] is not None else ""
        self.live.update(Text(f"leaky: step {max(builder.steps, recorder.step)}{total}{loss}{norm}{found}",
                              style="dim"))

    def print(self, renderable) -> None:
        """Above the live line on a terminal; plainly otherwise."""
        (self.live.console if self.live else self.console).print(renderable)


def _main_process() -> bool:
    """Under torchrun only rank 0 prints and writes."""
    from leaky.record.distributed import is_main

    return is_main()


def _error(text: str) -> None:
    """One unwrapped line on stderr: scripts and people both read it."""
    print(f"leaky: {text}", file=sys.stderr)


def _fails(report, fail_on: str) -> bool:
    if fail_on == "never":
        return False
    floor = Severity(fail_on).rank
    return any(f.severity.rank >= floor for f in report.findings)


def _emit(text: str, path: str | None, what: str) -> bool:
    """Write to a file, or to stdout for None or '-'; a one-line error on failure."""
    if path in (None, "-"):
        sys.stdout.write(text + "\n")
        return True
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    except OSError as exc:
        _error(f"cannot write the {what} to {path}: {exc.strerror}")
        return False
    return True


def _write_json(report, path: str) -> bool:
    return _emit(report.to_json(), path, "JSON report")


def _write_formatted(report, fmt: str, path: str | None, script: str) -> bool:
    import os

    from leaky.report.sarif import to_sarif_json

    text = report.to_json() if fmt == "json" else to_sarif_json(report, os.path.dirname(os.path.abspath(script)))
    return _emit(text, path, f"{fmt} output")


def cmd_audit(args) -> int:
    from leaky.report.terminal import print_report
    from leaky.script import ScriptError, run_script

    err = Console(stderr=True, highlight=False)
    out = Console(highlight=False)
    config = dataclasses.replace(AuditConfig(), steps=args.steps, fail_on=args.fail_on)
    script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    # NOTE: with machine output on stdout, the script's own prints go to stderr.
    quiet = args.format != "text" and args.output is None
    try:
        with _Progress(err, args.steps) as progress, \
                (contextlib.redirect_stdout(sys.stderr) if quiet else contextlib.nullcontext()):
            run = run_script(args.script, script_args, config, on_step=progress.on_step)
    except ScriptError as exc:
        _error(str(exc))
        return EXIT_UNUSABLE
    report = run.audit.report
    if not _main_process():
        return EXIT_FINDINGS if _fails(report, args.fail_on) else EXIT_OK
    if report.run.get("unauditable"):
        _error(f"cannot audit {args.script}: {report.run['unauditable']}.")
        return EXIT_UNUSABLE
    for note in report.run.get("notes", []):
        _error(note)
    if run.audit.stats.backward_calls == 0 and run.audit.stats.steps == 0:
        reason = f" (the script stopped: {run.error})" if run.error else ""
        _error(f"no backward pass was observed in {args.script}{reason}; nothing to audit. "
               "Does the script call loss.backward()?")
        if args.json:
            _write_json(report, args.json)
        return EXIT_UNUSABLE
    if args.format != "text":
        if not _write_formatted(report, args.format, args.output, args.script):
            return EXIT_UNUSABLE
    else:
        print_report(report, out, table=not args.no_table)
    if report.run.get("internal_error"):
        out.print(Text(f"leaky: observation stopped early on an internal error: {report.run['internal_error']}",
                       style="red"))
    if run.error:
        out.print(Text(f"leaky: the script raised after {report.run['steps']} steps: {run.error}", style="red"))
    if args.json and not _write_json(report, args.json):
        return EXIT_UNUSABLE
    if args.html and not _write_html(args.html, report.to_dict(), None):
        return EXIT_UNUSABLE
    return EXIT_FINDINGS if _fails(report, args.fail_on) else EXIT_OK


def _write_html(path: str, report: dict, run: dict | None) -> bool:
    from leaky.report.html import render_html, write_html

    try:
        write_html(path, render_html(report, run))
    except OSError as exc:
        _error(f"cannot write the HTML report to {path}: {exc.strerror}")
        return False
    return True


# -- watch, runs, show ------------------------------------------------------------------
def cmd_watch(args) -> int:
    from leaky.report.terminal import finding_renderable, print_report
    from leaky.script import ScriptError, run_script
    from leaky.store import StoreError
    from leaky.watch import DEFAULT_EVERY, Watch

    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    config = dataclasses.replace(AuditConfig(), steps=None, fail_on=args.fail_on)
    script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    try:
        with _Progress(err, None) as progress:
            def announce(finding, step):
                if _main_process():
                    progress.print(Text(f"step {step}: ", style="bold") + finding_renderable(finding))

            def make(script):
                sinks = []
                if args.tensorboard:
                    from leaky.integrations.tensorboard import TensorBoardSink

                    sinks.append(TensorBoardSink(args.tensorboard))
                return Watch(every=args.every or DEFAULT_EVERY, store=args.store, config=config,
                             fail_fast=args.fail_fast, on_finding=announce, script=script, argv=script_args,
                             on_step=lambda rec: progress.on_step(rec, len(watch_of[0].seen) if watch_of else 0),
                             sinks=sinks)

            watch_of: list = []

            def factory(script):
                watch_of.append(make(script))
                return watch_of[0]

            run = run_script(args.script, script_args, config, make_audit=factory)
    except (ScriptError, StoreError, ValueError, ImportError) as exc:
        _error(str(exc))
        return EXIT_UNUSABLE
    report = run.audit.report
    if not _main_process():
        return EXIT_FINDINGS if _fails(report, args.fail_on) else EXIT_OK
    if run.audit.stats.backward_calls == 0 and run.audit.stats.steps == 0:
        _error(f"no backward pass was observed in {args.script}; nothing to watch. "
               "Does the script call loss.backward()?")
        return EXIT_UNUSABLE
    for note in report.run.get("notes", []):
        _error(note)
    print_report(report, out, table=not args.no_table)
    if run.audit.run_id is not None:
        out.print(Text(f"leaky: run {run.audit.run_id} stored in {args.store} "
                       f"(leaky show {run.audit.run_id} --store {args.store})", style="dim"))
    if run.error:
        out.print(Text(f"leaky: the script raised after {report.run['steps']} steps: {run.error}", style="red"))
    if args.json and not _write_json(report, args.json):
        return EXIT_UNUSABLE
    if args.html and not _write_html(args.html, report.to_dict(), _stored_run(args.store, run.audit.run_id)):
        return EXIT_UNUSABLE
    stopped = run.status == "stopped" and args.fail_fast
    if stopped:
        out.print(Text("leaky: --fail-fast stopped training at the first error.", style="red"))
    return EXIT_FINDINGS if stopped or _fails(report, args.fail_on) else EXIT_OK


def _open_store(path: str):
    import os

    from leaky.store import Store

    if not os.path.exists(path):
        raise FileNotFoundError(f"no run store at {path}; `leaky watch` creates it (or pass --store PATH)")
    return Store(path)


def _stored_run(path: str, run_id: int | None) -> dict | None:
    if run_id is None:
        return None
    from leaky.report.html import run_payload
    from leaky.store import Store

    with Store(path) as store:
        return run_payload(store, run_id)


def cmd_report(args) -> int:
    from leaky.report.html import run_payload
    from leaky.store import StoreError, resolve_run

    try:
        with _open_store(args.store) as store:
            payload = run_payload(store, resolve_run(store, args.run))
    except (StoreError, FileNotFoundError) as exc:
        _error(str(exc))
        return EXIT_UNUSABLE
    if not _write_html(args.html, {}, payload):
        return EXIT_UNUSABLE
    Console(highlight=False).print(Text(f"leaky: wrote {args.html}", style="dim"))
    return EXIT_OK


def cmd_runs(args) -> int:
    from leaky.report.runs import runs_table
    from leaky.store import StoreError

    try:
        with _open_store(args.store) as store:
            Console(highlight=False).print(runs_table(store.runs(), args.store))
    except (StoreError, FileNotFoundError) as exc:
        _error(str(exc))
        return EXIT_UNUSABLE
    return EXIT_OK


def cmd_show(args) -> int:
    from leaky.report.runs import show_run
    from leaky.store import StoreError, resolve_run

    try:
        with _open_store(args.store) as store:
            run_id = resolve_run(store, args.run)
            Console(highlight=False).print(show_run(store, run_id))
    except (StoreError, FileNotFoundError) as exc:
        _error(str(exc))
        return EXIT_UNUSABLE
    return EXIT_OK


# -- explain ----------------------------------------------------------------------------
def cmd_explain(args) -> int:
    from leaky.explain import list_checks, page

    console = Console(highlight=False)
    if not args.check:
        console.print(list_checks())
        return EXIT_OK
    try:
        console.print(page(args.check))
    except KeyError as exc:
        _error(exc.args[0])
        return EXIT_UNUSABLE
    return EXIT_OK


# -- fix --------------------------------------------------------------------------------
def cmd_fix(args) -> int:
    import json

    from leaky.fix import FixConfig, try_fixes
    from leaky.report.fix import render_fix
    from leaky.script import ScriptError, script_program

    err = Console(stderr=True, highlight=False)
    if (args.script is None) == (args.example is None):
        _error("leaky fix takes a training script, or --example NAME (one of them)")
        return EXIT_UNUSABLE
    config = FixConfig(steps=args.steps, holdout=args.holdout, repeats=args.repeats)
    try:
        if args.example:
            from leaky.zoo import get

            example = get(args.example)
            program, name = (lambda: example.run(steps=config.steps + config.holdout + 1, seed=0)), args.example
        else:
            script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
            program, name = script_program(args.script, script_args), args.script
    except (ScriptError, KeyError) as exc:
        _error(exc.args[0])
        return EXIT_UNUSABLE

    status = err.status("leaky fix: starting") if err.is_terminal else contextlib.nullcontext()
    current = {"text": ""}

    def progress(text: str) -> None:
        current["text"] = text
        err.print(Text(f"leaky fix: {text}", style="dim"))

    def on_step(done: int, total: int) -> None:
        if err.is_terminal and done % 10 == 0:
            status.update(f"leaky fix: {current['text']}: step {done}/{total}")

    try:
        with status:
            result = try_fixes(program, config, name, progress, on_step)
    except KeyboardInterrupt:
        _error("interrupted: no fix was judged")
        return EXIT_UNUSABLE
    if result.baseline.error and not result.baseline.steps:
        _error(f"the script failed before its first optimizer step: {result.baseline.error}")
        return EXIT_UNUSABLE
    data = result.to_dict()
    if args.json and not _emit(json.dumps(data, indent=2, default=str), args.json, "JSON result"):
        return EXIT_UNUSABLE
    if args.json != "-":
        render_fix(Console(highlight=False), data)
    return EXIT_OK if result.baseline.steps else EXIT_UNUSABLE


# -- demo -------------------------------------------------------------------------------
def cmd_demo(args) -> int:
    from leaky.demo import run_demo

    with contextlib.suppress(KeyboardInterrupt):
        return run_demo(Console(highlight=False), steps=args.steps or 20, only=args.only)
    return EXIT_UNUSABLE
