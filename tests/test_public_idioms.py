"""Idioms met in public example programs (pytorch/examples), each in a small program of its
own: what leaky must say about them, and what it must not."""
from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.cli import main
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


LAYER_LOCAL = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)


class Local(nn.Linear):
    # a layer with its own optimizer and its own goodness loss (forward-forward)
    def __init__(self, n_in, n_out):
        super().__init__(n_in, n_out)
        self.relu = nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)

    def forward(self, x):
        return self.relu(F.linear(x / (x.norm(dim=1, keepdim=True) + 1e-4), self.weight, self.bias))

    def fit(self, pos, neg, steps):
        for _ in range(steps):
            good = torch.cat([2.0 - self(pos).pow(2).mean(1), self(neg).pow(2).mean(1) - 2.0])
            loss = F.softplus(good).mean()
            self.opt.zero_grad(); loss.backward(); self.opt.step()
        return self(pos).detach(), self(neg).detach()


pos, neg = torch.rand(512, 64), torch.rand(512, 64)   # pixels in [0, 1]
pos[:, :8] += 0.5
for layer in [Local(64, 128), Local(128, 128)]:
    pos, neg = layer.fit(pos, neg, 15)
"""


def test_units_dead_from_the_start_do_not_blame_the_learning_rate(tmp_path):
    """The second layer of a layer-local stack is fed the first one's ReLU outputs: all
    non-negative, so half its units start negative on every sample and never fire. No update
    killed them: the finding says so and does not name the learning rate as the line to change
    (raw torch: 64 of its 128 units are silent on all 1,024 samples from its first step on)."""
    path = tmp_path / "train.py"
    path.write_text(LAYER_LOCAL)
    out = tmp_path / "report.json"
    main(["audit", "--steps", "all", "--no-table", "--json", str(out), str(path)])
    dead = [f for f in json.loads(out.read_text())["findings"] if f["code"] == "LK102"]
    assert dead and all(2 * f["evidence"]["died_during_observation"] < f["evidence"]["dead_units"] for f in dead)
    for finding in dead:
        assert finding.get("cause") is None, finding["cause"]
        assert "never fired on any observed sample" in finding["message"]
        assert not finding["fix"].startswith("Lower the learning rate")
