"""`leaky probe`: the active checks, LK308 cannot-overfit and LK309 input-ignored.

    from leaky.probe import run_probes, ProbeConfig
    result = run_probes(lambda: train(), ProbeConfig(steps=200))

Each probe is a short re-run of the program from the same start (`leaky.rerun`, as
`leaky fix`'s are). See `session` for the protocol, `replay` for how the batch is replayed or
zeroed without editing files, and `leaky/checks/cannot_overfit.py`,
`leaky/checks/input_ignored.py` for the verdicts and their math.
"""
from leaky.probe.config import ProbeConfig

__all__ = ["SCHEMA", "ProbeConfig", "ProbeOutcome", "ProbeResult", "run_probes"]


def __getattr__(name: str):
    # NOTE: the session is imported on first use: the checks import this package's
    # records (config, stats) while leaky.checks itself is still being imported.
    if name in ("SCHEMA", "ProbeOutcome", "ProbeResult", "run_probes"):
        from leaky.probe import session

        return getattr(session, name)
    raise AttributeError(f"module 'leaky.probe' has no attribute {name!r}")
