"""LK105 recurrent-instability on hand-built stats: stats that must trigger it and stats that a
naive rule would misread but that must not (ruff-style fixtures, no training run). The zoo's
training runs (tests/e2e/test_checks_zoo.py) test the same checks end to end."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import op, recurrence, source, stats
from tests.check_cases import fires, quiet


# -- LK105 recurrent-instability -----------------------------------------------------------
def _rnn(kind: str, radius: float, profile):
    return stats(steps=20, recurrences=(recurrence(module="rnn", kind=kind, spectral_radius=radius, profile=profile,
                                                   op=op(op="rnn_tanh", module="rnn", source=source(line=30))),))


def test_lk105_a_recurrence_with_radius_above_one_that_grows_back_in_time():
    finding = fires("LK105", _rnn("rnn_tanh", 1.6, (1000.0, 100.0, 10.0, 1.0)))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.ERROR, "rnn", "rnn_tanh", 30)
    assert "spectral radius ρ = 1.6" in finding.message
    assert "the gradient reaching time step 0 is 1e+03× the one at step 3" in finding.message
    assert finding.evidence["growth_first_over_last"] == 1000.0


def test_lk105_a_small_radius_whose_gradient_never_reaches_the_start():
    finding = fires("LK105", _rnn("rnn_tanh", 0.3, (1e-4, 1e-2, 1.0)))
    assert finding.severity is Severity.WARNING and "shrinks" in finding.message


def test_lk105_a_gated_cell_or_a_mild_growth_is_quiet():
    # LSTM/GRU route the gradient around W_hh: a radius above 1 alone is not an explosion
    quiet("LK105", _rnn("lstm", 1.6, (5.0, 2.0, 1.0)))
    quiet("LK105", _rnn("lstm", 3.0, None))
    # growth 2 is below sqrt(time_growth) = 10
    quiet("LK105", _rnn("rnn_tanh", 1.6, (2.0, 1.5, 1.0)))
