"""LK304 precision-underflow on hand-built stats: stats that must trigger it and stats that a
naive rule would misread but that must not (ruff-style fixtures, no training run)."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import cast, op, source, stats
from tests.check_cases import fires, quiet


# -- LK304 precision-underflow -------------------------------------------------------------
def _half(zero: float, subnormal: float, **fields):
    dense = op(site=0, module="fc", underflow_share=zero, subnormal_share=subnormal, source=source(line=152))
    return stats(steps=20, ops=(dense,), **fields)


def test_lk304_float16_gradients_flushed_to_zero_point_at_the_autocast():
    autocast = cast(kind="autocast", dtype="float16", source=source(line=150))
    finding = fires("LK304", _half(0.6, 0.2, casts=(autocast,)))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.ERROR, "fc", "linear", 150)
    assert "60% are exactly 0 and 20% are subnormal" in finding.message
    assert "no GradScaler is active" in finding.message
    assert "float16 was chosen at train.py:150 (the autocast region)." in finding.message


def test_lk304_mostly_subnormal_is_a_warning_not_an_error():
    finding = fires("LK304", _half(0.05, 0.6, loss_scaler={"scale": 1024.0}))
    assert finding.severity is Severity.WARNING and finding.source.line == 152
    assert "a GradScaler is active with scale 1.02e+03" in finding.message


def test_lk304_a_minority_of_subnormals_is_quiet():
    # subnormals keep a few bits, and summed into a weight gradient they stay close to float32
    quiet("LK304", _half(0.05, 0.3))
