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
