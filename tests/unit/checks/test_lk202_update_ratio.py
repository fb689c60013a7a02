"""LK202 update-ratio on hand-built stats: stats that must trigger it and stats that a naive rule
would misread but that must not (ruff-style fixtures, no training run).
tests/unit/checks/test_loss_judgement.py has more (whose loss, moving targets)."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import optimizer, param, source, stats
from tests.check_cases import fires, quiet


# -- LK202 update-ratio --------------------------------------------------------------------
def _ratios(*values: float):
    return tuple(enumerate(values))


def _update(ratios, shape=(8, 8), kind: str = "SGD", lr: float = 3.0):
    weight = param(name="fc.weight", shape=shape, update_ratios=ratios)
    return stats(steps=len(ratios), params=(weight,), optimizers=(optimizer(kind=kind, lr=lr, source=source(line=100)),))


def test_lk202_updates_larger_than_the_weight_are_an_error_at_the_optimizer():
    finding = fires("LK202", _update(_ratios(2.0, 2.0, 2.0, 2.0, 2.0)))
    assert (finding.severity, finding.module, finding.source.line, finding.step) == (Severity.ERROR, "fc", 100, 4)
    assert "steps change fc.weight by a median 2× its norm" in finding.message
    assert "at step 0 the update was 2× the weight itself" in finding.message
    assert "The learning rate 3 is set where SGD is built (train.py:100)." in finding.message
    assert finding.evidence["direction"] == "high" and finding.evidence["median_ratio"] == 2.0


def test_lk202_one_overshoot_among_small_updates_is_a_warning():
    assert fires("LK202", _update(_ratios(0.01, 0.01, 1.5, 0.01))).severity is Severity.WARNING


def test_lk202_updates_too_small_to_matter_are_a_warning():
    finding = fires("LK202", _update(_ratios(1e-9, 1e-9, 1e-9), lr=1e-9))
    assert finding.severity is Severity.WARNING and finding.evidence["direction"] == "low"
    assert "no sampled step changed fc.weight by more than 1.0e-09× its norm" in finding.message


def test_lk202_adam_on_a_wide_layer_a_bias_a_quasi_newton_step_and_one_sample_are_quiet():
    quiet("LK202", _update(_ratios(0.1, 0.1, 0.1), kind="Adam", lr=1e-3))   # ~1e-1 trains fine
    quiet("LK202", _update(_ratios(2.0, 2.0, 2.0), shape=(8,)))             # biases start at 0
    quiet("LK202", _update(_ratios(2.5, 2.5, 2.5), kind="LBFGS", lr=0.8))   # not one update scaled by lr
    quiet("LK202", _update(_ratios(2.0)))                                    # fewer than update_min_steps
