"""LK304 judges underflow against float32, per dtype, and never counts zeros an op made
on purpose: a healthy ReLU network under bfloat16 autocast is not "49% flushed"."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky


def _relu_run(dtype):
    torch.manual_seed(0)
    x = torch.randn(1024, 32)
    y = (x[:, :4].sum(1) > 0).long()
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with leaky.audit(steps=None) as audit:
        for _ in range(20):
            i = torch.randint(0, 1024, (128,))
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                loss = F.cross_entropy(model(x[i]), y[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit.report


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, None])
def test_relu_zeros_are_not_underflow(dtype):
    report = _relu_run(dtype)
    assert report.by_code("LK304") == []
    # the zeros are there: the ReLUs switched about half the units off, as in float32
    relus = [o for o in report.to_dict()["ops"] if o["op"] == "relu"]
    assert len(relus) == 2 and all(0.3 < o["zeroed_share"] < 0.7 for o in relus)
