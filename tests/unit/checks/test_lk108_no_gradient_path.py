"""LK108 no-gradient-path on hand-built stats: stats that must trigger it and stats that a naive
rule would misread but that must not (ruff-style fixtures, no training run). The zoo's training
runs (tests/e2e/test_checks_zoo.py) test the same checks end to end."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import cut, optimizer, param, source, stats
from tests.check_cases import fires, quiet


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
