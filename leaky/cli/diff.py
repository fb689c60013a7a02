"""`leaky diff`: compare two runs, and name the first op where the gradient flow parted."""
from __future__ import annotations

import json
import os
import shlex

from leaky.cli.output import emit, error, live_progress
from leaky.cli.parser import EXIT_FINDINGS, EXIT_OK, EXIT_UNUSABLE, without_interpreter
from leaky.report.terminal import people_console


def _sides(args, progress, on_step) -> list:
    """A and B, in order: the positional reports or stored runs, then the --run commands, or
    the --example pair."""
    from leaky.diff.session import DiffError, made_run, report_file, stored_run

    if args.example:
        if args.sides or args.run:
            raise DiffError("--example NAME compares a built-in pair: give no other run")
        from leaky.zoo import get

        try:
            broken = get(args.example)
        except KeyError as exc:
            raise DiffError(exc.args[0]) from None
        if broken.fixed_by is None:
            raise DiffError(f"{args.example} has no fixed twin to compare with; the pairs are listed by `leaky demo`")
        pair = [get(broken.fixed_by), broken]
        sides = []
        for example in pair:
            progress(f"auditing {example.name} for {args.steps} steps")
            sides.append(made_run(example.name, "example", lambda e=example: e.run(steps=args.steps + 1, seed=0),
                                  args.steps, on_step=on_step))
        return sides
    if len(args.sides) + len(args.run) != 2:
        raise DiffError("leaky diff compares two runs: give A and B as reports (.json), stored runs (ids or "
                        "'latest'), or --run COMMAND twice")
    sides = []
    for spec in args.sides:
        sides.append(report_file(spec) if os.path.isfile(spec) or spec.endswith(".json")
                     else stored_run(args.store, spec))
    for command in args.run:
        sides.append(_command_side(command, args.steps, progress, on_step))
    return sides


def _command_side(command: str, steps: int, progress, on_step):
    from leaky.diff.session import DiffError, made_run
    from leaky.script import ScriptError, script_program

    try:
        words, _ = without_interpreter(shlex.split(command))   # `--run "python train.py"`: train.py
    except ValueError as exc:
        raise DiffError(f"--run {command!r}: {exc}") from None
    if not words:
        raise DiffError(f"--run {command!r}: no script to run")
    try:
        program = script_program(words[0], words[1:])
    except ScriptError as exc:
        raise DiffError(exc.args[0]) from None
    progress(f"auditing {command} for {steps} steps")
    return made_run(command, "run", program, steps, on_step=on_step)


def cmd_diff(args) -> int:
    from leaky.diff.session import DiffError, diff, unusable
    from leaky.report.diff import render_diff

    status, progress, on_step = live_progress("diff")
    sides = []
    try:
        with status:
            sides = _sides(args, progress, on_step)
            data = diff(*sides, reruns=args.reruns, steps=args.steps, progress=progress, on_step=on_step)
    except KeyboardInterrupt:
        error("interrupted: no comparison made")
        return 130
    except DiffError as exc:
        data = unusable(exc.args[0], *(sides + [None, None])[:2])
    if args.json and not emit(json.dumps(data, indent=2, default=str), args.json, "JSON result"):
        return EXIT_UNUSABLE
    if args.json != "-":
        render_diff(people_console(), data)
    if args.html and not _write_html(args.html, data):
        return EXIT_UNUSABLE
    if data["verdict"] == "unusable":
        error(data["reason"])
        return EXIT_UNUSABLE
    return EXIT_FINDINGS if data["verdict"] == "parted" else EXIT_OK


def _write_html(path: str, data: dict) -> bool:
    from leaky.report.html.diff import render_diff_html

    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(render_diff_html(data))
    except OSError as exc:
        error(f"cannot write the HTML page to {path}: {exc.strerror}")
        return False
    return True
