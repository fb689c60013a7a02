"""LK201 stale-parameter on hand-built stats: stats that must trigger it and stats that a naive
rule would misread but that must not (ruff-style fixtures, no training run)."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import optimizer, param, scheduler, source, stats
from tests.check_cases import fires, quiet


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
