"""LK307 loss-at-init on hand-built stats: stats that must trigger it and stats that a naive rule
would misread but that must not (ruff-style fixtures, no training run)."""
from __future__ import annotations

import math

from leaky.finding import Severity
from leaky.testing import loss_probe, op, stats, weight
from tests.check_cases import fires, quiet


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
