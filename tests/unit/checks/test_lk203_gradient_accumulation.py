"""LK203 gradient-accumulation on hand-built stats: stats that must trigger it and stats that a
naive rule would misread but that must not (ruff-style fixtures, no training run)."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import optimizer, source, stats
from tests.check_cases import fires, quiet


# -- LK203 gradient-accumulation -----------------------------------------------------------
def _carried(carried: int, checked: int):
    opt = optimizer(zero_grad_sources=(source(line=110),), step_source=source(line=113))
    return stats(steps=checked, used_optimizer=True, carry_checked={0: checked}, carried_steps={0: carried},
                 optimizer_modules={0: ["fc"]}, optimizers=(opt,), grad_norms=(1.0, 2.0, 3.0, 4.0, 5.0))


def test_lk203_gradients_never_zeroed_points_at_the_zero_grad_that_does_not_run():
    finding = fires("LK203", _carried(5, 5))
    assert (finding.severity, finding.module, finding.source.line) == (Severity.ERROR, "fc", 110)
    assert "in all 5 sampled steps every backward() started from the previous step's gradients" in finding.message
    assert "the total gradient norm went from 1 to 5" in finding.message
    assert "does not run before every step() (train.py:113)" in finding.message
    assert finding.evidence["grad_norm_ratio_last_first"] == 5.0


def test_lk203_accumulation_on_purpose_and_too_few_checks_are_quiet():
    # k backward() calls then step and zero: every optimizer step starts from zero
    quiet("LK203", _carried(0, 5))
    quiet("LK203", _carried(4, 5))
    quiet("LK203", _carried(2, 2))   # fewer than accumulation_min_steps (3)
