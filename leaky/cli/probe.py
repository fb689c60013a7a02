"""`leaky probe`: the active checks (LK308 cannot-overfit, LK309 input-ignored), run as
`leaky fix` runs its fixes: short re-runs of the script from the same start."""
from __future__ import annotations

import contextlib
import json

from rich.console import Console
from rich.text import Text

from leaky.cli.fix import trial_failure
from leaky.cli.output import emit, error
from leaky.cli.parser import EXIT_FINDINGS, EXIT_OK, EXIT_UNUSABLE
from leaky.failure import INTERRUPTED


def cmd_probe(args) -> int:
    from leaky.probe import ProbeConfig, run_probes
    from leaky.probe.session import FAIL, NOT_RUN
    from leaky.report.probe import render_probe
    from leaky.script import ScriptError, script_program

    err = Console(stderr=True, highlight=False)
    if (args.script is None) == (args.example is None):
        error("leaky probe takes a training script, or --example NAME (one of them)")
        return EXIT_UNUSABLE
    config = ProbeConfig(steps=args.steps, holdout=args.holdout, repeats=args.repeats)
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

    status = err.status("leaky probe: starting") if err.is_terminal else contextlib.nullcontext()
    current = {"text": ""}

    def progress(text: str) -> None:
        current["text"] = text
        err.print(Text(f"leaky probe: {text}", style="dim"))

    def on_step(done: int, total: int) -> None:
        if err.is_terminal and done % 10 == 0:
            status.update(f"leaky probe: {current['text']}: step {done}/{total}")

    try:
        with status:
            result = run_probes(program, config, name, progress, on_step)
    except KeyboardInterrupt:
        error("interrupted: no probe was judged")
        return INTERRUPTED
    base = result.baseline
    if base.failure is not None and not base.steps:
        error(f"{name} {base.failure.said()} before its first optimizer step; nothing to probe.")
        trial_failure(base, with_output=True)
        return base.failure.status
    data = result.to_dict()
    if args.json and not emit(json.dumps(data, indent=2, default=str), args.json, "JSON result"):
        return EXIT_UNUSABLE
    if args.json != "-":
        render_probe(Console(highlight=False), data)
    if base.failure is not None:
        error(f"the real-input run of {name} {base.failure.said()} after {base.steps} steps.")
        trial_failure(base)
        return base.failure.status
    verdicts = {p.verdict for p in result.probes}
    if FAIL in verdicts:
        return EXIT_FINDINGS
    return EXIT_UNUSABLE if NOT_RUN in verdicts else EXIT_OK
