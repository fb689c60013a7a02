"""`leaky fix`, `leaky demo` and `leaky explain`."""
from __future__ import annotations

import contextlib
import sys

from rich.console import Console
from rich.text import Text

from leaky.failure import INTERRUPTED
from leaky.cli.output import emit, error
from leaky.cli.parser import EXIT_OK, EXIT_UNUSABLE


def cmd_explain(args) -> int:
    from leaky.explain import list_checks, page

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
    import json

    from leaky.fix import FixConfig, try_fixes
    from leaky.report.fix import render_fix
    from leaky.script import ScriptError, script_program

    err = Console(stderr=True, highlight=False)
    if (args.script is None) == (args.example is None):
        error("leaky fix takes a training script, or --example NAME (one of them)")
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
        error(exc.args[0])
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
        error("interrupted: no fix was judged")
        return INTERRUPTED
    base = result.baseline
    if base.failure is not None and not base.steps:
        error(f"{name} {base.failure.said()} before its first optimizer step; no fix to try.")
        trial_failure(base, with_output=True)
        return base.failure.status
    data = result.to_dict()
    if args.json and not emit(json.dumps(data, indent=2, default=str), args.json, "JSON result"):
        return EXIT_UNUSABLE
    if args.json != "-":
        render_fix(Console(highlight=False), data)
    if base.failure is not None:
        error(f"the unfixed run of {name} {base.failure.said()} after {base.steps} steps.")
        trial_failure(base)
        return base.failure.status
    return EXIT_OK if base.steps else EXIT_UNUSABLE


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
        return run_demo(Console(highlight=False), steps=args.steps or 20, only=args.only)
    return EXIT_UNUSABLE
