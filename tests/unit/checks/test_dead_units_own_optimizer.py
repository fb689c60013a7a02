"""LK102 with several optimizers: what killed a layer's units is read from that layer's own
parameters and the optimizer that trains them, never from another model's.

A run that trains two things with two optimizers (SAC's critics and its entropy
temperature, an actor and a critic) alternates their steps in one series: a rate of 1e-3
followed by the other's 3e-2 is no learning-rate jump, and a large update of the other
model's weights did nothing to this layer's units."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from leaky.cli import main

# pixels in [0, 1] and Adam at 3e-2: the hidden ReLU units die in the first steps; beside it a
# second model with its own optimizer, stepped after it in each iteration
TWO_OPTIMIZERS = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
x = torch.rand(512, 256); y = torch.randint(0, 20, (512,))
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 20))
opt = torch.optim.Adam(model.parameters(), lr=0.03)  # MARK: optimizer
OTHER
for step in range(20):
    i = torch.randint(0, 512, (64,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad(); loss.backward(); opt.step()
    other_loss = OTHER_LOSS
    other_opt.zero_grad(); other_loss.backward(); other_opt.step()
"""
# SAC's temperature: one number from zero, its own Adam at a smaller rate
TEMPERATURE = ("log_alpha = torch.zeros(1, requires_grad=True)\n"
               "other_opt = torch.optim.Adam([log_alpha], lr=1e-3)",
               "-(log_alpha.exp() * (loss.detach() - 2.0))")
# a small model whose own updates are far larger than the first model's
FAST = ("probe = nn.Linear(4, 1)\n"
        "other_opt = torch.optim.SGD(probe.parameters(), lr=5.0)",
        "probe(torch.randn(32, 4)).pow(2).mean()")


def _dead_units(tmp_path: Path, other: tuple[str, str]) -> tuple[list[dict], int, Path]:
    text = textwrap.dedent(TWO_OPTIMIZERS).lstrip("\n").replace("OTHER_LOSS", other[1]).replace("OTHER", other[0])
    script = tmp_path / "train.py"
    script.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "# MARK: optimizer" in row)
    out = tmp_path / "report.json"
    main(["audit", "--steps", "40", "--no-table", "--json", str(out), str(script)])
    report = json.loads(out.read_text())
    dead = [f for f in report["findings"] if f["code"] == "LK102" and f["evidence"]["died_during_observation"]]
    assert dead, "the units must die during the observed steps"
    return dead, line, script


def test_rates_of_two_optimizers_in_turn_are_no_jump(tmp_path):
    dead, line, script = _dead_units(tmp_path, TEMPERATURE)
    for finding in dead:
        assert "learning rate jumped" not in finding["message"], finding["message"]
        assert finding["cause"]["line"] == line


def test_another_models_large_updates_are_not_blamed(tmp_path):
    dead, line, script = _dead_units(tmp_path, FAST)
    for finding in dead:
        assert finding["cause"] == {"file": str(script), "line": line, "what": "the learning rate 0.03 of Adam set here"}
