"""LK303 unnormalized-input on hand-built stats: stats that must trigger it and stats that a naive
rule would misread but that must not (ruff-style fixtures, no training run)."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import activation, input_stats, op, source, stats, weight
from tests.check_cases import fires, quiet


# -- LK303 unnormalized-input --------------------------------------------------------------
def _raw_input(mean, std, flat_share: float, weights=()):
    ops = (op(site=0, module="fc1"), op(site=1, op="sigmoid", module="act"))
    act = activation(site=1, op="sigmoid", module="act", flat_share=flat_share)
    data = input_stats(site=0, module="fc1", mean=mean, std=std, source=source(line=140))
    return stats(steps=20, ops=ops, activations=(act,), inputs=(data,), weights=weights)


def test_lk303_claims_only_the_saturation_its_inputs_cause_through_a_fan_based_init():
    # 2 features into 64 sigmoid units: Xavier std sqrt(2/66) = 0.174, z scale sqrt(2)·0.174·rms(x)
    layer = (weight(site=0, module="fc1", shape=(64, 2), std=5.0),)
    # rms(x) = 3.0: z scale 0.74, P(|z| > 5.99) ≈ 5e-16: the 95% flat is the weights' (LK302)
    quiet("LK303", _raw_input((4.0, 0.0), (1.0, 1.0), flat_share=0.95, weights=layer))
    # rms(x) = 41.2: z scale 10.2, 56% flat on their own: a warning, whatever the 95% both make
    finding = fires("LK303", _raw_input((30.0, 0.1), (50.0, 1.0), flat_share=0.95, weights=layer))
    assert finding.severity is Severity.WARNING and 0.5 < finding.evidence["flat_share_alone"] < 0.6


def test_lk303_raw_features_that_saturate_the_first_layer():
    finding = fires("LK303", _raw_input((30.0, 0.1), (50.0, 1.0), flat_share=0.95))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.ERROR, "fc1", "linear", 140)
    assert "(#0: mean 30, std 50, #1: mean 0.1, std 1)" in finding.message
    assert "leaving 95% of act's unit-samples in the flat region of sigmoid" in finding.message
    assert "torch.tensor([30, 0.1])" in finding.fix and finding.evidence["worst_feature_scale"] == 50.0


def test_lk303_raw_scale_with_a_healthy_layer_or_standardised_input_is_quiet():
    quiet("LK303", _raw_input((30.0, 0.1), (50.0, 1.0), flat_share=0.1))   # no measured harm
    quiet("LK303", _raw_input((0.5, -0.2), (1.2, 2.9), flat_share=0.95))   # saturated, but not by the input scale
