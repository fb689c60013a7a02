"""`leaky fix`: try each mechanical fix of an audit's findings as a short counterfactual run.

    from leaky.fix import try_fixes, FixConfig
    result = try_fixes(lambda: train(), FixConfig(steps=200))

See `session` for the protocol, `remedies` for which fix answers which finding (one file
per check, named like it), `runtime` for how a fix is applied without editing files, and
`leaky.rerun` for the runs and the noise.
"""
from leaky.fix.session import FixConfig, FixResult, Outcome, try_fixes

__all__ = ["FixConfig", "FixResult", "Outcome", "try_fixes"]
