"""LK205 judges a rise against the series' own spread (issue 30): a loss of minibatches on
different data (PPO's epochs over a rollout, heavy-tailed batches) swings from step to step,
and a last tenth 1.5x above the first within that spread is no trend. A loss that really
diverges rises step after step, far beyond it.

Real models, real backward passes and optimizers, under `leaky.audit()`.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import leaky
from leaky.finding import Severity
from leaky.testing import optimizer, series, stats
from tests.check_cases import fires, quiet


def _train(seed: int, lr: float, heavy: bool, steps: int = 30) -> tuple[list[float], list]:
    torch.manual_seed(seed)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    with leaky.audit(steps=None) as audit:
        for _ in range(steps):
            x = torch.randn(16, 8) * (1.0 if heavy else 3.0)
            y = torch.randn(16, 1)
            if heavy:   # heavy-tailed targets: one batch's loss can be many times another's
                y = y * torch.distributions.Exponential(1.0).sample((16, 1)) * 3
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses, audit.report.findings


@pytest.mark.parametrize("seed", [9, 20, 23])
def test_a_rise_within_the_batches_spread_is_quiet(seed):
    losses, findings = _train(seed, lr=1e-4, heavy=True)
    start, end = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert end > 1.5 * start   # what a rule without the spread would call diverging
    assert not [f for f in findings if f.code == "LK205"]


def test_a_loss_that_diverges_is_still_found():
    losses, findings = _train(0, lr=0.2, heavy=False)   # lr far past 2/curvature for inputs of scale 3
    assert losses[-1] > 100 * losses[0]
    assert [f for f in findings if f.code == "LK205" and f.severity.name in ("WARNING", "ERROR")]



# A series measured on benchmarks/zoo/b26-sum-reduction-loss (MSELoss(reduction='sum') over a
# batch of 256 x 2 outputs, the gradient 512x what the rate was chosen for): the loss climbs
# five orders of magnitude in five steps, then swings by one at the top.
CLIMB_AND_SWING = [257.3, 115.5, 2254.9, 231437.8, 360343.0, 5.77e8, 6.73e8, 8.54e7, 4.00e8, 2.43e8,
                   1.52e8, 3.43e8, 1.89e7, 3.33e8, 7.46e6, 2.38e8, 6.52e7, 1.20e8, 1.27e8, 3.32e7]


def test_a_loss_that_climbs_orders_of_magnitude_and_swings_there_is_found():
    """Huge swings in absolute terms, small next to the rise: the spread is taken on the log
    of the loss (a divergence grows geometrically)."""
    curve = stats(steps=len(CLIMB_AND_SWING), series=series(losses=CLIMB_AND_SWING), optimizers=(optimizer(),))
    finding = fires("LK205", curve)
    assert finding.severity == Severity.WARNING


def test_the_same_swings_without_the_climb_are_quiet():
    """The same top swings alone (a loss that starts high and swings there) are no trend."""
    swings = CLIMB_AND_SWING[5:] + CLIMB_AND_SWING[5:10]
    quiet("LK205", stats(steps=len(swings), series=series(losses=swings), optimizers=(optimizer(),)))
