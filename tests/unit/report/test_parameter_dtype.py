"""`parameters[].dtype` (issue 33): each parameter's dtype as torch names it, without the prefix."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import leaky


def test_each_parameter_row_names_its_dtype():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    model[2].to(torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with leaky.audit() as audit:
        for _ in range(3):
            out = model[2](model[1](model[0](torch.randn(16, 4))).double())
            loss = F.mse_loss(out, torch.randn(16, 1, dtype=torch.float64))
            opt.zero_grad()
            loss.backward()
            opt.step()
    dtypes = {row["name"]: row["dtype"] for row in audit.report.to_dict()["parameters"]}
    assert dtypes == {"model.0.weight": "float32", "model.0.bias": "float32", "model.2.weight": "float64",
                      "model.2.bias": "float64"}
