"""LK302 bad-initialization on hand-built stats: stats that must trigger it and stats that a naive
rule would misread but that must not (ruff-style fixtures, no training run)."""
from __future__ import annotations

import math

from leaky.finding import Severity
from leaky.testing import activation, op, source, stats, weight
from tests.check_cases import fires, quiet


# -- LK302 bad-initialization --------------------------------------------------------------
def test_lk302_identical_rows_are_an_error_at_the_init_line():
    layer = weight(site=0, module="fc1", shape=(16, 8), std=0.1, rows_identical=True, init_source=source(line=130))
    finding = fires("LK302", stats(steps=20, ops=(op(site=0, module="fc1"),), weights=(layer,)))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.ERROR, "fc1", "linear", 130)
    assert "all 16 units of fc1 start with identical weights" in finding.message
    assert finding.evidence == {"units": 16, "parameter": "fc1.weight"}


def test_lk302_a_weight_ten_times_its_kaiming_std_before_a_relu():
    ops = (op(site=0, module="fc1", source=source(line=132)), op(site=1, op="relu", module="act"))
    layer = weight(site=0, module="fc1", shape=(64, 100), std=2.0)
    finding = fires("LK302", stats(steps=20, ops=ops, weights=(layer,),
                                   activations=(activation(site=1, op="relu", module="act"),)))
    assert (finding.severity, finding.module, finding.source.line) == (Severity.WARNING, "fc1", 132)
    # Kaiming for ReLU: sqrt(2 / 100) = 0.141; 2.0 is 14.1× that
    assert math.isclose(finding.evidence["expected_std"], math.sqrt(0.02))
    assert "14.1× the fan-based std 0.141 for fan-in 100 and the relu after it" in finding.message
    assert "kaiming_normal_" in finding.fix


def _layers(rms: list[float]):
    ops = tuple(op(site=2 * i, module=f"fc{i}", out_rms=value) for i, value in enumerate(rms))
    weights = tuple(weight(site=2 * i, module=f"fc{i}", shape=(32, 32)) for i in range(len(rms)))
    return stats(steps=20, ops=ops, weights=weights)


def test_lk302_a_signal_that_grows_geometrically_with_depth():
    finding = fires("LK302", _layers([1.0, 10.0, 100.0, 1e3, 1e4]))
    assert (finding.severity, finding.module, finding.op, finding.step) == (Severity.ERROR, "fc1", "linear", 0)
    assert "(4.0 orders of magnitude, ×10 per layer)" in finding.message
    assert math.isclose(finding.evidence["orders_of_magnitude"], 4.0)


def test_lk302_a_zero_init_output_few_layers_and_a_zigzag_are_quiet():
    # an all-zero layer (a zero-initialised output or residual branch) is a deliberate choice
    zero = weight(site=0, module="out", shape=(10, 32), std=0.0, rows_identical=True)
    quiet("LK302", stats(steps=20, ops=(op(site=0, module="out"),), weights=(zero,)))
    quiet("LK302", _layers([1.0, 100.0, 1e4]))                           # fewer than init_depth_min_layers (4)
    # 4 orders end to end, but only 3 of 5 steps go up: below init_depth_consistent (0.75)
    quiet("LK302", _layers([1.0, 1e3, 1.0, 1e3, 1.0, 1e4]))
