"""LK305 wrong-gradient on hand-built stats: stats that must trigger it and stats that a naive
rule would misread but that must not (ruff-style fixtures, no training run)."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import function, source, stats
from tests.check_cases import fires, quiet


# -- LK305 wrong-gradient ------------------------------------------------------------------
def test_lk305_a_backward_that_disagrees_with_finite_differences():
    wrong = {"input": 0, "relative_error": 0.5, "analytic": 1.0, "numeric": 2.0}
    fn = function(name="MySquare", module="net", wrong=(wrong,), backward_source=source(line=158),
                  gradient_sources=(source(line=160),))
    finding = fires("LK305", stats(steps=20, functions=(fn,)))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.ERROR, "net", "MySquare", 160)
    assert "input 0: backward gives 1, finite differences 2 (relative error 0.5)" in finding.message
    assert "The gradient of input 0 is computed at train.py:160." in finding.message


def test_lk305_a_checked_function_that_agrees_is_quiet():
    quiet("LK305", stats(steps=20, functions=(function(name="MyRelu", module="net", checked=True),)))
