"""LK101-LK108 on hand-built stats: for each check, stats that must trigger it and stats
that a naive rule would misread but that must not (ruff-style fixtures, no training run).
The zoo's training runs (tests/test_checks_zoo.py) test the same checks end to end."""
from __future__ import annotations

import math

from leaky.finding import Severity
from leaky.testing import activation, cut, nonfinite, op, optimizer, param, recurrence, series, source, stats
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


# -- LK102 dead-units ----------------------------------------------------------------------
def _relu_layer(dead: int, samples: int = 640, **fields):
    relu = activation(site=1, op="relu", module="fc1", units=100, samples=samples, window=5, dead_units=dead,
                      source=source(line=20), **fields)
    return relu


def test_lk102_most_units_of_a_layer_dead_is_an_error():
    finding = fires("LK102", stats(steps=20, activations=(_relu_layer(70),)))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.ERROR, "fc1", "relu", 20)
    # 640 samples over 20 steps: 160 in the 5-step window
    assert "70% of fc1's 100 relu units (70) output 0 for all ~160 samples of the last 5 observed steps" in finding.message
    assert finding.evidence["dead_share"] == 0.7 and finding.evidence["window_samples"] == 160


def test_lk102_a_third_of_the_units_silent_is_info_not_a_warning():
    # healthy ReLU nets keep 30-35% silent units: worth knowing, no harm
    (finding,) = quiet("LK102", stats(steps=20, activations=(_relu_layer(30),)), below=Severity.WARNING)
    assert finding.severity is Severity.INFO
    assert fires("LK102", stats(steps=20, activations=(_relu_layer(45),))).severity is Severity.WARNING
    quiet("LK102", stats(steps=20, activations=(_relu_layer(20),)))


def test_lk102_too_few_samples_in_the_window_is_not_judged():
    # 100 samples over 20 steps: 25 in the window, fewer than dead_min_samples (32)
    quiet("LK102", stats(steps=20, activations=(_relu_layer(90, samples=100),)))


def _died_at_step_10(norm_at_9: float = 1.0, lr_at_9: float = 1e-3):
    norms = [norm_at_9 if step == 9 else 1.0 for step in range(20)]
    lrs = [lr_at_9 if step >= 9 else 1e-3 for step in range(20)]
    relu = _relu_layer(70, died_steps=(10,) * 5, seen_dead_steps=(10,) * 5)
    return stats(steps=20, activations=(relu,), series=series(grad_norms=norms, lr=lrs))


def test_lk102_names_the_gradient_spike_just_before_the_units_died():
    finding = fires("LK102", _died_at_step_10(norm_at_9=50.0))
    assert finding.step == 10 and finding.evidence["died_between_steps"] == [10, 10]
    assert ("5 of them fired earlier and died at step 10. Just before, at step 9, the gradient norm spiked "
            "to 50 (50× its median).") in finding.message


def test_lk102_a_small_bump_or_lr_step_before_the_deaths_is_not_a_spike():
    # 5× the median is below dead_spike_factor (10), and an lr ×1.5 below lr_jump (2)
    finding = fires("LK102", _died_at_step_10(norm_at_9=5.0, lr_at_9=1.5e-3))
    assert "Nothing unusual was measured at step 9." in finding.message
    jumped = fires("LK102", _died_at_step_10(lr_at_9=3e-3))
    assert "the learning rate jumped from 0.001 to 0.003" in jumped.message


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


# -- LK107 non-finite ----------------------------------------------------------------------
def _sqrt():
    return op(site=6, op="sqrt", node="SqrtBackward0", module="dist", source=source(line=50))


def test_lk107_the_backward_of_sqrt_at_zero_is_the_origin():
    event = nonfinite(phase="backward", step=3, op=_sqrt(), value="nan")
    finding = fires("LK107", stats(nonfinite=(event,), losses=(1.0, 1.0, 1.0, math.nan)))
    assert (finding.severity, finding.module, finding.op, finding.source.line, finding.step) == \
        (Severity.ERROR, "dist", "sqrt", 50, 3)
    assert "turned a finite incoming gradient into nan at step 3: d/dx sqrt(x) = 1/(2·sqrt(x))" in finding.message


def test_lk107_the_earlier_event_is_the_origin_and_the_later_its_consequence():
    log = op(site=7, op="log", module="head", source=source(line=52))
    events = (nonfinite(phase="forward", step=2, op=log, value="inf"),
              nonfinite(phase="backward", step=3, op=_sqrt()))
    finding = fires("LK107", stats(nonfinite=events, losses=(1.0, 1.0, math.inf)))
    assert (finding.op, finding.step) == ("log", 2)
    assert finding.evidence["then"] == {"phase": "backward", "op": "sqrt", "module": "dist", "step": 3}


def test_lk107_a_masked_inf_and_a_grad_scaler_overflow_step_are_quiet():
    # a forward -inf that a later op masked never reached the loss
    quiet("LK107", stats(nonfinite=(nonfinite(phase="forward", op=_sqrt(), value="inf"),), losses=(1.0, 0.9)))
    # a GradScaler skips an overflowed step and lowers its scale
    quiet("LK107", stats(nonfinite=(nonfinite(phase="backward", op=_sqrt(), value="inf"),), losses=(1.0, 0.9),
                         loss_scaler={"scale": 65536.0}))


# -- LK108 no-gradient-path ----------------------------------------------------------------
def _encoder(**fields):
    encoder = param(name="encoder.weight", shape=(16, 8), grad_steps=0, grad_norm=None, **fields)
    return (encoder, param(name="head.weight", grad_steps=5))


def test_lk108_a_detach_that_cuts_the_encoder_off():
    detach = cut(kind="detach", producer=("encoder",), module="model", source=source(line=60))
    finding = fires("LK108", stats(steps=5, used_optimizer=True, params=_encoder(), cuts=(detach,)))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == \
        (Severity.ERROR, "encoder", "detach", 60)
    assert ("encoder.weight (128 values, trainable) received no gradient in any of the 5 observed steps: "
            "the path to the loss is cut by .detach() here.") in finding.message


def test_lk108_frozen_parameters_and_a_target_network_outside_the_optimizer_are_quiet():
    quiet("LK108", stats(steps=5, used_optimizer=True, params=_encoder(requires_grad=False)))
    quiet("LK108", stats(steps=5, used_optimizer=True, params=_encoder(in_optimizer=False)))


def test_lk108_gradients_a_zero_grad_cleared_before_the_step_are_lk201s():
    cleared = optimizer(cleared_steps=4, cleared_source=source(line=90))
    quiet("LK108", stats(steps=5, used_optimizer=True, params=_encoder(), optimizers=(cleared,)))
