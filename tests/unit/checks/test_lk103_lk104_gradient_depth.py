"""LK103 vanishing-gradient and LK104 exploding-gradient on hand-built stats: stats that must
trigger each and stats that a naive rule would misread but that must not (ruff-style fixtures, no
training run). The zoo's training runs (tests/e2e/test_checks_zoo.py) test the same checks end
to end."""
from __future__ import annotations

import math

from leaky.finding import Severity
from leaky.testing import op, param, series, source, stats
from tests.check_cases import fires, quiet


# -- LK103 vanishing-gradient / LK104 exploding-gradient -----------------------------------
def _depth(grad_in: tuple[float, float, float], gain: float, frozen: bool = False):
    """fc1 -> act -> fc2 -> fc3 in forward order; each module's entry gradient is grad_in."""
    ops = (op(site=0, op="linear", module="fc1", grad_in=grad_in[0], gain=0.9),
           op(site=1, op="sigmoid", module="act", grad_in=grad_in[0], gain=gain, source=source(line=14)),
           op(site=2, op="linear", module="fc2", grad_in=grad_in[1], gain=0.7),
           op(site=3, op="linear", module="fc3", grad_in=grad_in[2], gain=1.0))
    params = (param(name="fc1.weight", requires_grad=not frozen), param(name="fc2.weight"), param(name="fc3.weight"))
    return stats(steps=20, ops=ops, params=params)


def test_lk103_the_gradient_lost_toward_the_input_is_located_at_the_op():
    finding = fires("LK103", _depth((1e-6, 1e-2, 1.0), gain=1e-4))
    # the sigmoid (gain 1e-4) is named; fc2's gain of 0.7 is above culprit_shrink_gain (0.5)
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.ERROR, "act", "sigmoid", 14)
    assert "is 1.0e-06 of the one entering fc3 (6.0 orders of magnitude lost over 3" in finding.message
    assert [o["op"] for o in finding.evidence["lossy_ops"]] == ["sigmoid"]
    assert finding.evidence["ratio"] == 1e-6


def test_lk103_two_orders_of_magnitude_or_a_frozen_layer_are_quiet():
    quiet("LK103", _depth((1e-2, 1e-1, 1.0), gain=0.1))
    # a frozen fc1's tiny gradient is not on a trained path: fc2 -> fc3 lose only 100×
    quiet("LK103", _depth((1e-9, 1e-2, 1.0), gain=1e-4, frozen=True))


def test_lk104_the_gradient_grown_toward_the_input_is_located_at_the_op():
    finding = fires("LK104", _depth((1e4, 10.0, 1.0), gain=50.0))
    assert (finding.severity, finding.module, finding.op) == (Severity.WARNING, "act", "sigmoid")
    assert "1.0e+04× the one entering fc3 (4.0 orders of magnitude gained" in finding.message
    assert finding.evidence["amplifying_ops"][0]["gain"] == 50.0


def test_lk104_a_spike_over_the_median_of_earlier_steps():
    finding = fires("LK104", stats(series=series(grad_norms=[1.0] * 5 + [500.0] + [1.0] * 4)))
    assert (finding.severity, finding.step) == (Severity.WARNING, 5)
    assert "the total gradient norm is 500, 500× the median 1" in finding.message
    assert finding.evidence == {"grad_norm": 500.0, "median_before": 1.0}


def test_lk104_an_overflowed_gradient_norm_is_an_error():
    finding = fires("LK104", stats(series=series(grad_norms=[1.0, 1.0, math.inf])))
    assert (finding.severity, finding.step, finding.evidence["grad_norm"]) == (Severity.ERROR, 2, "inf")


def test_lk104_large_first_steps_and_a_50x_bump_are_not_spikes():
    # large norms at initialisation leave no history to spike against; 50× is below spike_factor (100)
    quiet("LK104", stats(series=series(grad_norms=[1000.0, 800.0, 1.0, 1.0, 1.0, 1.0])))
    quiet("LK104", stats(series=series(grad_norms=[1.0] * 5 + [50.0])))
