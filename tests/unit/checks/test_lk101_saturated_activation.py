"""LK101 saturated-activation on hand-built stats: stats that must trigger it and stats that a
naive rule would misread but that must not (ruff-style fixtures, no training run). The zoo's
training runs (tests/e2e/test_checks_zoo.py) test the same checks end to end."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import activation, op, source, stats
from tests.check_cases import fires, quiet


# -- LK101 saturated-activation ----------------------------------------------------------
def _sigmoid_layer(flat_share: float, family: str = "sigmoid"):
    act = activation(site=1, op=family, module="fc1", units=64, samples=640, flat_share=flat_share,
                     median_derivative_share=4e-4, source=source(line=12))
    return stats(steps=20, ops=(op(site=1, op=family, module="fc1", gain=2e-3),), activations=(act,))


def test_lk101_a_sigmoid_layer_pinned_flat_is_an_error():
    finding = fires("LK101", _sigmoid_layer(0.95))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.ERROR, "fc1", "sigmoid", 12)
    # the median local derivative: 4e-4 of sigmoid's maximum 1/4; flat: below 1% of 1/4
    assert "the median is 1.0e-04, and 95% of 64 units × 640 samples sit where it is below 0.0025" in finding.message
    assert "passes on 0.002 of the gradient" in finding.message
    assert finding.evidence["flat_share"] == 0.95


def test_lk101_a_tanh_layer_half_flat_is_a_warning():
    finding = fires("LK101", _sigmoid_layer(0.6, family="tanh"))
    assert finding.severity is Severity.WARNING
    assert "1−tanh² is at most 1" in finding.message


def test_lk101_a_partly_flat_tanh_layer_is_quiet():
    quiet("LK101", _sigmoid_layer(0.4, family="tanh"))


def _attention(peaked_share: float, gain: float):
    softmax = activation(site=2, op="softmax", module="attn", peaked_share=peaked_share, source=source(line=33))
    return stats(steps=20, ops=(op(site=2, op="softmax", module="attn", gain=gain),), activations=(softmax,))


def test_lk101_a_peaked_softmax_whose_gradient_flows_is_allowed():
    # peaked attention is normal: only a backward gain that shows the gradient blocked counts
    quiet("LK101", _attention(peaked_share=1.0, gain=0.3))
    quiet("LK101", _attention(peaked_share=0.98, gain=1e-4))


def test_lk101_a_peaked_softmax_that_blocks_the_gradient_is_info_only():
    finding = fires("LK101", _attention(peaked_share=1.0, gain=1e-4))
    assert (finding.severity, finding.module, finding.op) == (Severity.INFO, "attn", "softmax")
    assert "100% of softmax rows" in finding.message and "backward gain here is 1.0e-04" in finding.message


def _scores_at_init(first_flat: float | None, peaked: float = 0.9, gain: float = 0.05):
    softmax = activation(site=2, op="softmax", module="attn", peaked_share=peaked, source=source(line=33),
                         first_flat_share=first_flat, first_jacobian_share=0.05,
                         detail={"dim": -1, "dim_size": 16, "scores_site": 1})
    scores = op(site=1, op="matmul", module="attn", gain=1.0, source=source(line=31))
    return stats(steps=20, ops=(scores, op(site=2, op="softmax", module="attn", gain=gain)), activations=(softmax,))


def test_lk101_a_softmax_one_hot_from_its_first_step_points_at_its_scores():
    finding = fires("LK101", _scores_at_init(0.6))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.WARNING, "attn", "softmax", 33)
    assert finding.cause is not None and finding.cause.line == 31          # the line that computed the scores
    # flat: tr J below 1% of a uniform row's 1 - 1/16 = 0.9375
    assert "60% of the rows" in finding.message and "1 − 1/n = 0.938 (n = 16)" in finding.message
    assert finding.evidence["first_step_flat_row_share"] == 0.6
    assert fires("LK101", _scores_at_init(0.95)).severity is Severity.ERROR


def test_lk101_a_softmax_that_starts_spread_is_quiet_however_peaked_it_learns_to_be():
    quiet("LK101", _scores_at_init(0.3, peaked=0.9))     # a causal mask's first rows, a few sharp heads
    quiet("LK101", _scores_at_init(0.0, peaked=0.98))    # peaked later: learned (gain still flows)
    quiet("LK101", _scores_at_init(None, peaked=0.98))   # no first-step statistics: the old rule only
