"""Modules named as the script names them when only a part of each model runs on its own.

Layer-local training (the forward-forward idiom): each layer is an `nn.Linear` with a child
`self.relu` and its own optimizer, held in a plain list and trained by
`for i, layer in enumerate(layers): layer.train_layer(...)`, which calls `self.forward(x)`,
so only the child relus' module hooks fire. The loop variable `layer` names both layers over
the run: the first relu was named by its class (`ReLU`), the second `layer.relu#2`, and both
layers' parameters `layer`. The script's own names are `layers[0].relu`, `layers[1]`."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.cli import main

LAYER_LOCAL = """
import sys
import torch
import torch.nn.functional as F
from torch import nn

LR = float(sys.argv[1])
torch.manual_seed(0)
labels = torch.randint(0, 4, (256,))
features = torch.randn(4, 12)[labels] * 2 + torch.randn(256, 12)


class LocalLayer(nn.Linear):
    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.relu = nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=LR)

    def forward(self, x):
        return self.relu(super().forward(x / (x.norm(2, 1, keepdim=True) + 1e-4)))

    def train_layer(self, x_pos, x_neg):
        for _ in range(15):
            g_pos, g_neg = self.forward(x_pos).pow(2).mean(1), self.forward(x_neg).pow(2).mean(1)
            loss = F.softplus(torch.cat([2.0 - g_pos, g_neg - 2.0])).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


def with_label(x, y):
    return torch.cat([F.one_hot(y, 4).float() * x.abs().max(), x], dim=1)


layers = [LocalLayer(16, 64), LocalLayer(64, 64)]
h_pos, h_neg = with_label(features, labels), with_label(features, (labels + 1) % 4)
for i, layer in enumerate(layers):
    h_pos, h_neg = layer.train_layer(h_pos, h_neg)
"""


def _audit(tmp_path: Path, lr: str) -> dict:
    script = tmp_path / "layer_local.py"
    script.write_text(textwrap.dedent(LAYER_LOCAL).lstrip("\n"))
    out = tmp_path / "report.json"
    main(["audit", "--steps", "30", "--no-table", "--json", str(out), str(script), lr])
    return json.loads(out.read_text())


def _assert_unique(report: dict) -> None:
    for rows, key in ((report["modules"], "module"), (report["parameters"], "name")):
        names = [row[key] for row in rows]
        assert len(set(names)) == len(names), names


def test_each_layer_of_a_layer_local_script_is_named_by_its_list_index(tmp_path):
    report = _audit(tmp_path, "3")   # Adam at 3 (x100): each layer kills its own units
    dead = sorted(f["module"] for f in report["findings"] if f["code"] == "LK102" and f["severity"] == "error")
    assert dead == ["layers[0].relu", "layers[1].relu"], report["findings"]
    high = sorted(f["module"] for f in report["findings"] if f["code"] == "LK202")
    assert high == ["layers[0]", "layers[1]"], report["findings"]
    params = {p["name"]: p["module"] for p in report["parameters"]}
    assert params == {f"layers[{i}].{name}": f"layers[{i}]" for i in (0, 1) for name in ("weight", "bias")}
    _assert_unique(report)


def test_a_healthy_layer_local_script_keeps_the_same_names(tmp_path):
    report = _audit(tmp_path, "0.03")
    assert [f for f in report["findings"] if f["severity"] in ("warning", "error")] == []
    assert {row["module"] for row in report["modules"]} >= {"layers[0].relu", "layers[1].relu"}
    assert not any(row["module"] in ("ReLU", "layer") for row in report["modules"])
    _assert_unique(report)


# -- the same, from a function's locals ------------------------------------------------------
class Block(nn.Module):
    """A block whose own forward never runs: the training loop calls its parts."""

    def __init__(self, width: int, bias: float) -> None:
        super().__init__()
        self.linear, self.act = nn.Linear(width, width), nn.ReLU()
        with torch.no_grad():
            self.linear.bias.fill_(bias)   # -100: every unit of its relu is dead from the start

    def step(self, x):
        return self.act(self.linear(x))


def _train(model: nn.Module, forward) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 8), torch.randn(64, 8)
    for _ in range(4):
        loss = F.mse_loss(forward(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_blocks_in_a_dict_run_by_a_loop_are_named_by_their_keys():
    blocks = {"enc": Block(8, 0.0), "dec": Block(8, -100.0)}

    def forward(h):
        for block in blocks.values():
            h = block.step(h)
        return h

    with leaky.audit(steps=4) as run:
        _train(nn.ModuleList(blocks.values()), forward)
    dead = {f.module for f in run.report.by_code("LK102")}
    assert dead == {"blocks['dec'].act"}, dead
    modules = {row["module"] for row in run.report.modules}
    assert {"blocks['enc'].linear", "blocks['dec'].linear", "blocks['enc'].act"} <= modules, modules


def test_a_loop_over_a_module_list_is_named_by_the_model_that_holds_it():
    model = nn.Module()
    model.blocks = nn.ModuleList([Block(8, 0.0), Block(8, -100.0)])

    def forward(h):
        for block in model.blocks:
            h = block.step(h)
        return h

    with leaky.audit(steps=4) as run:
        _train(model, forward)
    dead = {f.module for f in run.report.by_code("LK102")}
    assert dead == {"model.blocks.1.act"}, dead
    params = {row["name"] for row in run.report.parameters}
    assert {"model.blocks.0.linear.weight", "model.blocks.1.linear.bias"} <= params, params
