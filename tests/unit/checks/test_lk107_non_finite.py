"""LK107 non-finite on hand-built stats: stats that must trigger it and stats that a naive rule
would misread but that must not (ruff-style fixtures, no training run). The zoo's training runs
(tests/e2e/test_checks_zoo.py) test the same checks end to end."""
from __future__ import annotations

import math

from leaky.finding import Severity
from leaky.testing import nonfinite, op, source, stats
from tests.check_cases import fires, quiet


# -- LK107 non-finite ----------------------------------------------------------------------
def _sqrt():
    return op(site=6, op="sqrt", node="SqrtBackward0", module="dist", source=source(line=50))


def test_lk107_the_backward_of_sqrt_at_zero_is_the_origin():
    event = nonfinite(phase="backward", step=3, op=_sqrt(), value="nan")
    finding = fires("LK107", stats(nonfinite=(event,), losses=(1.0, 1.0, 1.0, math.nan)))
    assert (finding.severity, finding.module, finding.op, finding.source.line, finding.step) == \
        (Severity.ERROR, "dist", "sqrt", 50, 3)
    assert "turned a finite incoming gradient into nan at step 3: d/dx sqrt(x) = 1/(2·sqrt(x))" in finding.message


def test_lk107_the_earlier_event_is_the_origin_and_the_later_its_consequence():
    log = op(site=7, op="log", module="head", source=source(line=52))
    events = (nonfinite(phase="forward", step=2, op=log, value="inf"),
              nonfinite(phase="backward", step=3, op=_sqrt()))
    finding = fires("LK107", stats(nonfinite=events, losses=(1.0, 1.0, math.inf)))
    assert (finding.op, finding.step) == ("log", 2)
    assert finding.evidence["then"] == {"phase": "backward", "op": "sqrt", "module": "dist", "step": 3}


def test_lk107_a_masked_inf_and_a_grad_scaler_overflow_step_are_quiet():
    # a forward -inf that a later op masked never reached the loss
    quiet("LK107", stats(nonfinite=(nonfinite(phase="forward", op=_sqrt(), value="inf"),), losses=(1.0, 0.9)))
    # a GradScaler skips an overflowed step and lowers its scale
    quiet("LK107", stats(nonfinite=(nonfinite(phase="backward", op=_sqrt(), value="inf"),), losses=(1.0, 0.9),
                         loss_scaler={"scale": 65536.0}))
