"""LK201-LK205 on hand-built stats: for each check, stats that must trigger it and stats
that a naive rule would misread but that must not (ruff-style fixtures, no training run).
tests/test_loss_judgement.py has more of LK202/LK204/LK205 (whose loss, moving targets)."""
from __future__ import annotations

import math

from leaky.finding import Severity
from leaky.testing import optimizer, param, scheduler, series, source, stats
from tests.check_cases import cause, fires, quiet


# -- LK201 stale-parameter -----------------------------------------------------------------
def test_lk201_a_head_added_after_the_optimizer_was_built():
    head = param(name="head.weight", in_optimizer=False, grad_steps=5, grad_norm=0.25,
                 created_after_optimizer=True, source=source(line=75))
    finding = fires("LK201", stats(steps=5, used_optimizer=True, params=(head,),
                                   optimizers=(optimizer(source=source(line=70)),)))
    assert (finding.severity, finding.module, finding.source.line) == (Severity.ERROR, "head", 75)
    assert "head.weight receive gradients (last norm 0.25) but are in no optimizer's param groups" in finding.message
    assert "created at train.py:75, after the optimizer was built (train.py:70)." in finding.message


def test_lk201_a_group_whose_scheduler_drove_the_rate_to_zero():
    lambda_lr = scheduler(kind="LambdaLR", source=source(line=80), function_source=source(line=81))
    opt = optimizer(kind="SGD", initial_lrs=(0.1,), lr_range=((0.0, 0.0),), scheduler=lambda_lr)
    weight = param(name="fc.weight", grad_steps=5, grad_norm=0.5, graded_update_steps=5, zero_update_steps=5)
    finding = fires("LK201", stats(steps=5, used_optimizer=True, params=(weight,), optimizers=(opt,)))
    assert (finding.severity, finding.module, finding.source.line) == (Severity.ERROR, "fc", 81)
    assert "in each of 5 sampled steps" in finding.message and "lr was 0 in every sampled step" in finding.message
    assert finding.evidence["lr_range"] == [0.0, 0.0]


def test_lk201_gradients_cleared_between_backward_and_step():
    opt = optimizer(kind="SGD", cleared_steps=4, cleared_source=source(line=90))
    weight = param(name="fc.weight", grad_steps=0, grad_norm=None)
    finding = fires("LK201", stats(steps=5, used_optimizer=True, params=(weight,), optimizers=(opt,)))
    assert (finding.severity, finding.source.line, finding.evidence["steps"]) == (Severity.ERROR, 90, 4)
    assert "clears them between backward() and SGD.step() (in 4 observed steps)" in finding.message


def test_lk201_an_optimizer_that_never_stepped():
    finding = fires("LK201", stats(backward_calls=10, idle_optimizer=True, params=(param(grad_steps=10),),
                                   idle_source=source(line=95)))
    assert (finding.severity, finding.source.line) == (Severity.ERROR, 95)
    assert "backward() ran 10 times" in finding.message


def test_lk201_a_frozen_parameter_outside_the_optimizer_is_quiet():
    frozen = param(name="backbone.weight", requires_grad=False, in_optimizer=False, grad_steps=0, grad_norm=None)
    trained = param(name="head.weight", grad_steps=5, graded_update_steps=5)
    quiet("LK201", stats(steps=5, used_optimizer=True, params=(frozen, trained), optimizers=(optimizer(),)))


def test_lk201_one_unchanged_step_is_not_stale():
    # fewer sampled steps than stale_min_steps (2): a single rounding-away step proves nothing
    weight = param(name="fc.weight", grad_steps=5, graded_update_steps=1, zero_update_steps=1)
    quiet("LK201", stats(steps=5, used_optimizer=True, params=(weight,), optimizers=(optimizer(),)))


# -- LK202 update-ratio --------------------------------------------------------------------
def _ratios(*values: float):
    return tuple(enumerate(values))


def _update(ratios, shape=(8, 8), kind: str = "SGD", lr: float = 3.0):
    weight = param(name="fc.weight", shape=shape, update_ratios=ratios)
    return stats(steps=len(ratios), params=(weight,), optimizers=(optimizer(kind=kind, lr=lr, source=source(line=100)),))


def test_lk202_updates_larger_than_the_weight_are_an_error_at_the_optimizer():
    finding = fires("LK202", _update(_ratios(2.0, 2.0, 2.0, 2.0, 2.0)))
    assert (finding.severity, finding.module, finding.source.line, finding.step) == (Severity.ERROR, "fc", 100, 4)
    assert "steps change fc.weight by a median 2× its norm" in finding.message
    assert "at step 0 the update was 2× the weight itself" in finding.message
    assert "The learning rate 3 is set where SGD is built (train.py:100)." in finding.message
    assert finding.evidence["direction"] == "high" and finding.evidence["median_ratio"] == 2.0


def test_lk202_one_overshoot_among_small_updates_is_a_warning():
    assert fires("LK202", _update(_ratios(0.01, 0.01, 1.5, 0.01))).severity is Severity.WARNING


def test_lk202_updates_too_small_to_matter_are_a_warning():
    finding = fires("LK202", _update(_ratios(1e-9, 1e-9, 1e-9), lr=1e-9))
    assert finding.severity is Severity.WARNING and finding.evidence["direction"] == "low"
    assert "no sampled step changed fc.weight by more than 1.0e-09× its norm" in finding.message


def test_lk202_adam_on_a_wide_layer_a_bias_a_quasi_newton_step_and_one_sample_are_quiet():
    quiet("LK202", _update(_ratios(0.1, 0.1, 0.1), kind="Adam", lr=1e-3))   # ~1e-1 trains fine
    quiet("LK202", _update(_ratios(2.0, 2.0, 2.0), shape=(8,)))             # biases start at 0
    quiet("LK202", _update(_ratios(2.5, 2.5, 2.5), kind="LBFGS", lr=0.8))   # not one update scaled by lr
    quiet("LK202", _update(_ratios(2.0)))                                    # fewer than update_min_steps


# -- LK203 gradient-accumulation -----------------------------------------------------------
def _carried(carried: int, checked: int):
    opt = optimizer(zero_grad_sources=(source(line=110),), step_source=source(line=113))
    return stats(steps=checked, used_optimizer=True, carry_checked={0: checked}, carried_steps={0: carried},
                 optimizer_modules={0: ["fc"]}, optimizers=(opt,), grad_norms=(1.0, 2.0, 3.0, 4.0, 5.0))


def test_lk203_gradients_never_zeroed_points_at_the_zero_grad_that_does_not_run():
    finding = fires("LK203", _carried(5, 5))
    assert (finding.severity, finding.module, finding.source.line) == (Severity.ERROR, "fc", 110)
    assert "in all 5 sampled steps every backward() started from the previous step's gradients" in finding.message
    assert "the total gradient norm went from 1 to 5" in finding.message
    assert "does not run before every step() (train.py:113)" in finding.message
    assert finding.evidence["grad_norm_ratio_last_first"] == 5.0


def test_lk203_accumulation_on_purpose_and_too_few_checks_are_quiet():
    # k backward() calls then step and zero: every optimizer step starts from zero
    quiet("LK203", _carried(0, 5))
    quiet("LK203", _carried(4, 5))
    quiet("LK203", _carried(2, 2))   # fewer than accumulation_min_steps (3)


# -- LK204 loss-not-decreasing -------------------------------------------------------------
FLAT = [3.30 - 0.0004 * i for i in range(40)]


def _flat(**fields):
    return stats(steps=40, series=series(losses=FLAT), optimizers=(optimizer(),), **fields)


def test_lk204_a_flat_loss_with_dead_units_to_explain_it_is_a_warning_at_the_cause():
    dead = cause("LK102", Severity.WARNING, module="fc1", op="relu", line=20)
    finding = fires("LK204", _flat(params=(param(loss_change_bound=1e-2),)), causes=(dead,))
    assert (finding.severity, finding.module, finding.op, finding.source.line, finding.step) == \
        (Severity.WARNING, "fc1", "relu", 20, 39)
    assert "over 40 steps: 0.4% lower, short of the 1% drop that counts as learning." in finding.message
    assert "Likely cause: LK102 dead-units at fc1 · relu (train.py:20)." in finding.message
    assert finding.evidence["explained_by"] == ["LK102"] and finding.fix == "fix for LK102"


def test_lk204_steps_too_small_to_move_the_loss_are_stuck():
    finding = fires("LK204", _flat(params=(param(loss_change_bound=2e-8),)))
    assert finding.severity is Severity.WARNING and finding.module == "fc"
    assert "Σ ||g||·||Δw|| = 2.0e-08" in finding.message


def test_lk204_a_flat_loss_without_evidence_is_info_and_a_falling_one_quiet():
    (finding,) = quiet("LK204", _flat(params=(param(loss_change_bound=1e-2),)), below=Severity.WARNING)
    assert finding.severity is Severity.INFO and "learning rate" not in finding.fix
    falling = stats(steps=40, series=series(losses=[1.0 - 0.02 * i for i in range(40)]), optimizers=(optimizer(),))
    quiet("LK204", falling, causes=(cause("LK102"),))
    # 15% higher at the end is rising (LK205's business), not flat
    rising = stats(steps=40, series=series(losses=[1.0 + 0.005 * i for i in range(40)]), optimizers=(optimizer(),))
    quiet("LK204", rising, causes=(cause("LK102"),))


# -- LK205 loss-diverging ------------------------------------------------------------------
RISING = [0.5 + 0.03 * i for i in range(40)]


def _curve(losses):
    return stats(steps=len(losses), series=series(losses=losses), optimizers=(optimizer(),))


def test_lk205_a_rising_loss_points_at_the_update_ratio_that_drives_it():
    high = cause("LK202", Severity.ERROR, module="fc", op=None, line=100, evidence={"direction": "high"})
    finding = fires("LK205", _curve(RISING), causes=(high,))
    assert (finding.severity, finding.module, finding.source.line, finding.step) == (Severity.WARNING, "fc", 100, 39)
    # start and end: the means of the first and last 4 steps (a tenth, at least 3)
    assert math.isclose(finding.evidence["loss_start"], 0.545) and math.isclose(finding.evidence["loss_end"], 1.625)
    assert "rose from 0.545 to" in finding.message and "over 40 steps" in finding.message
    assert finding.evidence["explained_by"] == ["LK202"] and finding.fix == "fix for LK202"
    # a learning rate too low does not explain a rising loss
    low = cause("LK202", Severity.WARNING, module="fc", op=None, line=100, evidence={"direction": "low"})
    unexplained = fires("LK205", _curve(RISING), causes=(low,))
    assert unexplained.evidence["explained_by"] == [] and unexplained.module is None


def test_lk205_a_loss_that_overflows_is_an_error():
    finding = fires("LK205", _curve(RISING[:30] + [math.inf] * 10))
    assert (finding.severity, finding.step, finding.evidence["nonfinite_step"]) == (Severity.ERROR, 30, 30)


def test_lk205_a_mild_rise_and_a_short_run_are_quiet():
    quiet("LK205", _curve([1.0 + 0.008 * i for i in range(40)]))   # 1.28×: below loss_rise_factor (1.5)
    quiet("LK205", _curve([0.5 + 0.3 * i for i in range(10)]))     # fewer steps than loss_min_steps (20)
