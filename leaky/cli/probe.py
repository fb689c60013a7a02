"""`leaky probe`: the active checks (LK308 cannot-overfit, LK309 input-ignored), run as
`leaky fix` runs its fixes: short re-runs of the script from the same start."""
from __future__ import annotations

from leaky.cli.fix import rerun_command
from leaky.cli.parser import EXIT_FINDINGS, EXIT_OK, EXIT_UNUSABLE


def cmd_probe(args) -> int:
    from leaky.probe import ProbeConfig, run_probes
    from leaky.probe.session import FAIL, NOT_RUN
    from leaky.report.probe import render_probe

    config = ProbeConfig(steps=args.steps, holdout=args.holdout, repeats=args.repeats)
    result, code = rerun_command(args, "probe", config, run_probes, render_probe,
                                 ("nothing to probe", "the real-input run", "no probe was judged"))
    if result is None:
        return code
    verdicts = {p.verdict for p in result.probes}
    if FAIL in verdicts:
        return EXIT_FINDINGS
    return EXIT_UNUSABLE if NOT_RUN in verdicts else EXIT_OK
