"""Idioms met in public example programs (pytorch/examples), each in a small program of its
own: what leaky must say about them, and what it must not."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.fix.metrics import measure


class ThreeReluNet(nn.Module):
    """One module that calls F.relu after each of its layers: three relu sites, one module."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 32), nn.Linear(32, 24)
        self.out = nn.Linear(24, 3)

    def forward(self, x):
        x = F.relu(self.a(x))
        x = F.relu(self.b(x))
        x = F.relu(self.c(x))
        return self.out(x)


def test_fix_measures_dead_units_at_the_findings_own_relu_line():
    """`leaky fix` reads an LK102 finding's headline number at the finding's own line, not at
    the first relu the same module runs (a conv's relu of 32 channels quoted as '0/32' for a
    dead fc layer of 128)."""
    torch.manual_seed(0)
    model = ThreeReluNet()
    with torch.no_grad():
        model.c.bias.fill_(-20.0)              # every unit of the third relu is dead
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with leaky.audit(steps=6) as audit:
        for _ in range(6):
            x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    dead = [f for f in audit.report.findings if f.code == "LK102"]
    assert len(dead) == 1 and dead[0].evidence["units"] == 24
    label, value = measure(dead[0], audit.stats, audit.report.findings)
    assert (label, value) == ("dead units", "24/24")
