"""`ops[].gain_spread` (issue 33): the population standard deviation over steps of log10 of an
op's per-step gain, whose mean gives `gain`. The oracle is torch.autograd.grad on the same run
without leaky (an audit leaves the losses bit for bit those of raw torch)."""
from __future__ import annotations

import contextlib
import math
import statistics

import torch
import torch.nn.functional as F
from torch import nn

import leaky


class TanhNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.last = nn.Linear(8, 16), nn.Linear(16, 1)

    def forward(self, x):
        hidden = self.first(x)
        activated = torch.tanh(hidden)
        return self.last(activated), hidden, activated


def _train(steps: int, same_batch: bool, lr: float, audited: bool):
    """Trains TanhNet; each step's log10 |dL/d hidden| / |dL/d tanh(hidden)| when not audited."""
    torch.manual_seed(0)
    model = TanhNet()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    batches = [(torch.randn(32, 8) * 3, torch.randn(32, 1)) for _ in range(steps)]
    if same_batch:
        batches = [batches[0]] * steps
    gains = []
    with leaky.audit(steps=None) if audited else contextlib.nullcontext() as audit:
        for x, y in batches:
            out, hidden, activated = model(x)
            loss = F.mse_loss(out, y)
            if not audited:
                into_tanh, from_tanh = torch.autograd.grad(loss, [hidden, activated], retain_graph=True)
                gains.append(math.log10(into_tanh.norm().item() / from_tanh.norm().item()))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit, gains


def _tanh_row(audit) -> dict:
    (row,) = [row for row in audit.report.to_dict()["ops"] if row["op"] == "tanh"]
    return row


def test_gain_spread_is_the_standard_deviation_of_the_per_step_log_gains():
    audit, _ = _train(steps=6, same_batch=False, lr=0.1, audited=True)
    _, gains = _train(steps=6, same_batch=False, lr=0.1, audited=False)
    row = _tanh_row(audit)
    assert row["steps"] == 6 and len(gains) == 6
    assert math.isclose(row["gain"], 10 ** statistics.fmean(gains), rel_tol=1e-9)
    assert math.isclose(row["gain_spread"], statistics.pstdev(gains), rel_tol=1e-6)
    assert row["gain_spread"] > 1e-3


def test_gain_spread_is_zero_when_every_step_is_the_same():
    audit, _ = _train(steps=5, same_batch=True, lr=0.0, audited=True)
    row = _tanh_row(audit)
    assert row["steps"] == 5 and 0 <= row["gain_spread"] < 1e-6


def test_gain_spread_is_null_with_one_step():
    audit, _ = _train(steps=1, same_batch=False, lr=0.1, audited=True)
    assert _tanh_row(audit)["gain_spread"] is None
