"""LK205 loss-diverging on hand-built stats: stats that must trigger it and stats that a naive
rule would misread but that must not (ruff-style fixtures, no training run).
tests/unit/checks/test_loss_judgement.py has more (whose loss, moving targets)."""
from __future__ import annotations

import math

from leaky.finding import Severity
from leaky.testing import optimizer, series, stats
from tests.check_cases import cause, fires, quiet


# -- LK205 loss-diverging ------------------------------------------------------------------
RISING = [0.5 + 0.03 * i for i in range(40)]


def _curve(losses):
    return stats(steps=len(losses), series=series(losses=losses), optimizers=(optimizer(),))


def test_lk205_a_rising_loss_points_at_the_update_ratio_that_drives_it():
    high = cause("LK202", Severity.ERROR, module="fc", op=None, line=100, evidence={"direction": "high"})
    finding = fires("LK205", _curve(RISING), causes=(high,))
    assert (finding.severity, finding.module, finding.source.line, finding.step) == (Severity.WARNING, "fc", 100, 39)
    # start and end: the means of the first and last 4 steps (a tenth, at least 3)
    assert math.isclose(finding.evidence["loss_start"], 0.545) and math.isclose(finding.evidence["loss_end"], 1.625)
    assert "rose from 0.545 to" in finding.message and "over 40 steps" in finding.message
    assert finding.evidence["explained_by"] == ["LK202"] and finding.fix == "fix for LK202"
    # a learning rate too low does not explain a rising loss
    low = cause("LK202", Severity.WARNING, module="fc", op=None, line=100, evidence={"direction": "low"})
    unexplained = fires("LK205", _curve(RISING), causes=(low,))
    assert unexplained.evidence["explained_by"] == [] and unexplained.module is None


def test_lk205_a_loss_that_overflows_is_an_error():
    finding = fires("LK205", _curve(RISING[:30] + [math.inf] * 10))
    assert (finding.severity, finding.step, finding.evidence["nonfinite_step"]) == (Severity.ERROR, 30, 30)


def test_lk205_a_mild_rise_and_a_short_run_are_quiet():
    quiet("LK205", _curve([1.0 + 0.008 * i for i in range(40)]))   # 1.28×: below loss_rise_factor (1.5)
    quiet("LK205", _curve([0.5 + 0.3 * i for i in range(10)]))     # fewer steps than loss_min_steps (20)
