"""`leaky audit` and `leaky watch`: run the script under observation, then report."""
from __future__ import annotations

import contextlib
import dataclasses
import sys

from rich.text import Text

from leaky.config import AuditConfig
from leaky.cli.output import (Progress, closing_lines, end_of_script, error, exit_status, main_process,
    nothing_observed, other_rank_status, write_formatted, write_html, write_json)
from leaky.cli.parser import EXIT_FINDINGS, EXIT_UNUSABLE
from leaky.report.overhead import overhead_line
from leaky.report.terminal import people_console
from leaky.cli.stored import stored_run


def cmd_audit(args) -> int:
    from leaky.report.terminal import print_report
    from leaky.script import ScriptError, run_script

    err = people_console(stderr=True)
    out = people_console()
    config = dataclasses.replace(AuditConfig(), steps=args.steps, fail_on=args.fail_on)
    script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    # NOTE: with machine output on stdout, the script's own prints go to stderr.
    quiet = args.format != "text" and args.output is None
    try:
        with Progress(err, args.steps) as progress, \
                (contextlib.redirect_stdout(sys.stderr) if quiet else contextlib.nullcontext()):
            run = run_script(args.script, script_args, config, on_step=progress.on_step)
    except ScriptError as exc:
        error(str(exc))
        return EXIT_UNUSABLE
    report = run.audit.report
    if not main_process():
        return other_rank_status(run)
    notice = err if quiet else out    # leaky's closing lines: never into machine output on stdout
    if report.run.get("unauditable"):
        error(f"cannot audit {args.script}: {report.run['unauditable']}.")
        end_of_script(run)
        return run.failure.status if run.failure else EXIT_UNUSABLE
    for note in report.run.get("notes", []):
        error(note)
    if run.audit.stats.backward_calls == 0 and run.audit.stats.steps == 0:
        if args.json:
            write_json(report, args.json)
        return nothing_observed(args.script, run, report, "audit")
    if args.format != "text":
        if not write_formatted(report, args.format, args.output, args.script):
            return EXIT_UNUSABLE
    else:
        print_report(report, out, table=not args.no_table)
    closing_lines(notice, run, report)
    if args.json and not write_json(report, args.json):
        return EXIT_UNUSABLE
    if args.html and not write_html(args.html, report.to_dict(), None):
        return EXIT_UNUSABLE
    end_of_script(run)
    return exit_status(run, report, args.fail_on)


def cmd_watch(args) -> int:
    from leaky.report.announce import announced, announcement, unconfirmed_line
    from leaky.report.terminal import print_report
    from leaky.script import ScriptError, run_script
    from leaky.store import StoreError
    from leaky.watch import DEFAULT_SHARE, Watch, watch_sinks

    out = people_console()
    err = people_console(stderr=True)
    config = dataclasses.replace(AuditConfig(), steps=None, fail_on=args.fail_on)
    script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    try:
        with Progress(err, None) as progress:
            def announce(finding, step):   # one line each; the full text is the report's
                if main_process() and announced(finding):
                    progress.print(announcement(finding, step))

            def make(script):
                if args.every and args.overhead:
                    error(f"--every {args.every} observes every {args.every}-th step whatever it costs: "
                          f"--overhead {args.overhead:.1%} is not used")
                return Watch(every=args.every, overhead=args.overhead or DEFAULT_SHARE, store=args.store, config=config,
                             fail_fast=args.fail_fast, on_finding=announce, script=script, argv=script_args,
                             on_step=lambda rec: progress.on_step(rec, len(watch_of[0].seen) if watch_of else 0),
                             sinks=watch_sinks(args.tensorboard or None))

            watch_of: list = []

            def factory(script):
                watch_of.append(make(script))
                return watch_of[0]

            run = run_script(args.script, script_args, config, make_audit=factory)
    except (ScriptError, StoreError, ValueError, ImportError) as exc:
        error(str(exc))
        return EXIT_UNUSABLE
    report = run.audit.report
    if not main_process():
        return other_rank_status(run)
    if run.audit.stats.backward_calls == 0 and run.audit.stats.steps == 0:
        if args.json:
            write_json(report, args.json)   # as audit does: a CI job reads the findings either way
        return nothing_observed(args.script, run, report, "watch")
    for note in report.run.get("notes", []):
        error(note)
    print_report(report, out, table=not args.no_table)
    cost = overhead_line(report.run.get("overhead"))
    if cost:
        out.print(Text(cost, style="dim"), soft_wrap=True)
    unconfirmed = [(said, now) for said, now in run.audit.unconfirmed if announced(said)]
    if unconfirmed:
        out.print(unconfirmed_line(unconfirmed), soft_wrap=True)
    if run.audit.run_id is not None:
        out.print(Text(f"leaky: run {run.audit.run_id} stored in {args.store} "
                       f"(leaky show {run.audit.run_id} --store {args.store})", style="dim"))
    closing_lines(out, run, report)
    if args.json and not write_json(report, args.json):
        return EXIT_UNUSABLE
    if args.html and not write_html(args.html, report.to_dict(), stored_run(args.store, run.audit.run_id)):
        return EXIT_UNUSABLE
    stopped = run.status == "stopped" and args.fail_fast
    if stopped:
        out.print(Text("leaky: --fail-fast stopped training at the first error.", style="red"))
        return EXIT_FINDINGS
    end_of_script(run)
    return exit_status(run, report, args.fail_on)
