"""LK106 dead-zone on hand-built stats: stats that must trigger it and stats that a naive rule
would misread but that must not (ruff-style fixtures, no training run). The zoo's training runs
(tests/e2e/test_checks_zoo.py) test the same checks end to end."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import activation, op, source, stats
from tests.check_cases import fires, quiet


# -- LK106 dead-zone -----------------------------------------------------------------------
def _zone(name: str, zeroed: float, **fields):
    return stats(steps=20, ops=(op(site=4, op=name, module="q", zeroed_share=zeroed, nonzero_in=1280.0,
                                   source=source(line=40), **fields),))


def test_lk106_a_clamp_that_zeroes_most_of_the_gradient_is_an_error():
    finding = fires("LK106", _zone("clamp", 0.7, detail={"low": -1.0, "high": 1.0}))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.ERROR, "q", "clamp", 40)
    assert "clamp sets the gradient of 70% of the 1280 elements that reach the loss" in finding.message
    assert "Bounds here: [-1.0, 1.0]." in finding.message
    assert finding.evidence["zeroed_share"] == 0.7 and "smooth_l1_loss" in finding.fix


def test_lk106_a_round_without_straight_through_is_a_warning_at_a_third():
    assert fires("LK106", _zone("round", 0.3)).severity is Severity.WARNING


def test_lk106_a_hardtanh_is_judged_on_its_flat_share():
    hardtanh = stats(steps=20, ops=(op(site=5, op="hardtanh", module="act"),),
                     activations=(activation(site=5, op="hardtanh", module="act", flat_share=0.6),))
    finding = fires("LK106", hardtanh)
    assert finding.severity is Severity.ERROR and finding.evidence["zeroed_share"] == 0.6


def test_lk106_relu_sparsity_an_ordinary_softmax_and_a_light_clamp_are_quiet():
    quiet("LK106", _zone("relu", 0.9))                                   # LK102's business
    quiet("LK106", _zone("softmax", 0.9, detail={"dim_size": 10}))       # zeros of probabilities already 0
    quiet("LK106", _zone("clamp", 0.1))
    quiet("LK106", _zone("clamp", 0.9, steps=0))                         # its backward never ran
