"""LK301-LK305 on hand-built stats: for each check, stats that must trigger it and stats
that a naive rule would misread but that must not (ruff-style fixtures, no training run)."""
from __future__ import annotations

import math

from leaky.finding import Severity
from leaky.testing import activation, batch_mixing, cast, function, input_stats, loss_probe, op, source, stats, weight
from tests.check_cases import fires, quiet


# -- LK301 loss-output-mismatch ------------------------------------------------------------
def _loss_after(node: str, name: str, **fields):
    producer = op(site=3, op=name, node=node, module="head", source=source(line=118))
    probe = loss_probe(input_node=node, input_site=3, source=source(line=120), **fields)
    return stats(steps=20, ops=(producer,), losses_seen=(probe,))


def test_lk301_cross_entropy_after_a_softmax_points_at_the_softmax():
    finding = fires("LK301", _loss_after("SoftmaxBackward0", "softmax", low=0.01, high=0.9))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == \
        (Severity.ERROR, "head", "softmax", 118)
    assert "cross_entropy applies its own normalisation, but its input already went through softmax" in finding.message
    assert "(here [0.01, 0.9])" in finding.message
    assert finding.evidence["input_range"] == [0.01, 0.9]


def test_lk301_binary_cross_entropy_on_raw_outputs_points_at_the_loss_call():
    probe = loss_probe(op="binary_cross_entropy", expects="probabilities", input_shape=(32, 1), target_shape=(32, 1),
                       target_dtype="float32", low=-2.0, high=3.0, source=source(line=125))
    finding = fires("LK301", stats(steps=20, losses_seen=(probe,)))
    assert (finding.severity, finding.op, finding.source.line) == (Severity.ERROR, "binary_cross_entropy", 125)
    assert "it was given [-2, 3]" in finding.message


def test_lk301_log_softmax_into_cross_entropy_or_nll_and_tanh_onto_its_range_are_quiet():
    # softmax(log_softmax(z)) = softmax(z): the same loss and gradient as raw logits
    quiet("LK301", _loss_after("LogSoftmaxBackward0", "log_softmax", low=-9.0, high=-0.01))
    quiet("LK301", _loss_after("LogSoftmaxBackward0", "log_softmax", op="nll_loss", expects="log-probabilities",
                               low=-9.0, high=-0.01))
    quiet("LK301", _loss_after("TanhBackward0", "tanh", op="mse_loss", expects="values", input_shape=(32, 1),
                               target_shape=(32, 1), target_dtype="float32", low=-0.9, high=0.9,
                               target_low=-1.0, target_high=1.0))


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


# -- hand-built stats ------------------------------------------------------------------------------
def _lk307_ce(first: float, classes: int = 10):
    head = op(site=3, module="head")
    loss = loss_probe(site=4, input_site=3, start={"neutral": "classes", "loss": first, "classes": classes})
    return stats(steps=20, ops=(head,), losses_seen=(loss,), weights=(weight(site=3, module="head", shape=(10, 64)),))


def test_lk307_unit():
    finding = fires("LK307", _lk307_ce(13.3))
    assert (finding.module, finding.severity) == ("head", Severity.WARNING)
    assert "5.78× what a neutral output layer scores (2.3: log C = log 10" in finding.message
    quiet("LK307", _lk307_ce(2.0 * math.log(10) - 0.01))       # just under the factor
    quiet("LK307", _lk307_ce(13.3, classes=1))                 # no classes to be uniform over
    moving = stats(steps=20, ops=(op(site=3, module="head"),), target_syncs=(50,),
                   losses_seen=_lk307_ce(13.3).losses_seen, weights=_lk307_ce(13.3).weights)
    quiet("LK307", moving)                              # a bootstrapped target: both ends move
    after_an_op = stats(steps=20, ops=(op(site=3, op="softmax", module="act"),), losses_seen=_lk307_ce(13.3).losses_seen)
    quiet("LK307", after_an_op)                         # not fed by a layer: that op is the story


def test_lk306_unit():
    finding = fires("LK306", stats(batch_mixing=(batch_mixing(source=source(line=12)),)))
    assert (finding.severity, finding.op, finding.source.line, finding.cause.line) == (Severity.ERROR, "view", 12, 12)
    assert "depends on 3 other samples of the batch of 8" in finding.message and "transpose" in finding.fix
    attention = fires("LK306", stats(batch_mixing=(batch_mixing(op="multi_head_attention_forward", module="attn",
                                                                time_major=True),)))
    assert "batch_first=True" in attention.fix
    routed = fires("LK306", stats(batch_mixing=(batch_mixing(by_design="mixture-of-experts-routing"),)))
    assert routed.severity is Severity.INFO
    quiet("LK306", stats(batch_mixing=(batch_mixing(mixed=False, op=None),)))          # per-sample
    quiet("LK306", stats(batch_mixing=(batch_mixing(judged=False, mixed=False),)))     # not judged
    quiet("LK306", stats(batch_mixing=(batch_mixing(by_design="graph-message-passing"),)))
    quiet("LK306", stats(batch_mixing=(batch_mixing(by_design="batch-norm-without-running-statistics"),)))
