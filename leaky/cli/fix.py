"""`leaky fix`, `leaky demo` and `leaky explain`."""
from __future__ import annotations

import contextlib
import sys

from leaky.cli.output import emit, error, live_progress
from leaky.cli.parser import EXIT_OK, EXIT_UNUSABLE
from leaky.report.terminal import people_console


def cmd_explain(args) -> int:
    from rich.console import Console

    from leaky.explain import list_checks, page

    # NOTE: a page is prose, wrapped at the width even into a pipe: rich's Markdown lists crop
    # their lines where the console does not wrap.
    console = Console(highlight=False)
    if not args.check:
        console.print(list_checks())
        return EXIT_OK
    try:
        console.print(page(args.check))
    except KeyError as exc:
        error(exc.args[0])
        return EXIT_UNUSABLE
    return EXIT_OK


def cmd_fix(args) -> int:
    from leaky.fix import FixConfig, try_fixes
    from leaky.report.fix import render_fix

    result, code = rerun_command(args, "fix", FixConfig(steps=args.steps, holdout=args.holdout, repeats=args.repeats),
                                 try_fixes, render_fix, ("no fix to try", "the unfixed run", "no fix was judged"))
    if result is None:
        return code
    return EXIT_OK if result.baseline.steps else EXIT_UNUSABLE


def rerun_command(args, verb: str, config, run, render, words: tuple[str, str, str]):
    """What `leaky fix` and `leaky probe` share: the program (a script or --example NAME),
    progress on stderr, `run(program, config, name, progress, on_step)`, the JSON, the
    terminal view, and the script's own failure. `words`: (nothing to do, the first run,
    interrupted). Returns (result, None), or (None, the exit status) when it ends early."""
    import json

    from leaky.failure import INTERRUPTED
    from leaky.script import ScriptError, script_program

    nothing, first_run, interrupted = words
    if (args.script is None) == (args.example is None):
        error(f"leaky {verb} takes a training script, or --example NAME (one of them)")
        return None, EXIT_UNUSABLE
    try:
        if args.example:
            from leaky.zoo import get

            example = get(args.example)
            program, name = (lambda: example.run(steps=config.steps + config.holdout + 1, seed=0)), args.example
        else:
            script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
            program, name = script_program(args.script, script_args), args.script
    except (ScriptError, KeyError) as exc:
        error(exc.args[0])
        return None, EXIT_UNUSABLE

    status, progress, on_step = live_progress(verb)
    try:
        with status:
            result = run(program, config, name, progress, on_step)
    except KeyboardInterrupt:
        error(f"interrupted: {interrupted}")
        return None, INTERRUPTED
    base = result.baseline
    if base.failure is not None and not base.steps:
        error(f"{name} {base.failure.said()} before its first optimizer step; {nothing}.")
        trial_failure(base, with_output=True)
        return None, base.failure.status
    data = result.to_dict()
    if args.json and not emit(json.dumps(data, indent=2, default=str), args.json, "JSON result"):
        return None, EXIT_UNUSABLE
    if args.json != "-":
        render(people_console(), data)
    if base.failure is not None:
        error(f"{first_run} of {name} {base.failure.said()} after {base.steps} steps.")
        trial_failure(base)
        return None, base.failure.status
    return result, None


def trial_failure(trial, with_output: bool = False) -> None:
    """The run's traceback on stderr; `with_output`: after its last output lines (a usage
    message, say: `leaky fix` keeps the script's output to itself)."""
    from leaky.failure import print_failure, strip_escapes

    sys.stdout.flush()
    if with_output and trial.output:
        print(trial.output if sys.stderr.isatty() else strip_escapes(trial.output), file=sys.stderr)
    print_failure(trial.failure, sys.stderr)


def cmd_demo(args) -> int:
    from leaky.demo import run_demo

    with contextlib.suppress(KeyboardInterrupt):
        return run_demo(people_console(), steps=args.steps or 20, only=args.only)
    return EXIT_UNUSABLE
