"""The report's `config` (issue 33): how a run was set up, as `leaky diff` compares two runs.

Real runs: an Adam at 3e-4 with a StepLR, an nn.init call, raw inputs of mean 100, and the
script's own train()/eval() calls, each found at the line of this file that made it.
"""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky

_TRAIN = nn.Module.__dict__["train"]


def line_of(marker: str) -> int:
    """The line of this file that ends with `# <marker>`."""
    lines = Path(__file__).read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}"))


class Net(nn.Module):
    """A subclass that overrides train(): its calls are still the script's, at the script's line."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.Tanh())
        self.head = nn.Linear(16, 1)

    def train(self, mode: bool = True) -> "Net":
        super().train(mode)
        return self

    def forward(self, x):
        return self.head(self.body(x))


def _run(steps: int = 4, audited: bool = True):
    torch.manual_seed(0)
    losses = []
    with leaky.audit(steps=None) if audited else contextlib.nullcontext() as audit:
        model = Net()
        nn.init.normal_(model.head.weight, std=0.02)  # init
        model.eval()  # eval
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)  # optimizer
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)  # scheduler
        model.train()  # train
        for _ in range(steps):
            x = torch.randn(32, 4) + 100.0  # inputs
            loss = F.mse_loss(model(x), torch.randn(32, 1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()  # scheduler step
            losses.append(loss.item())
        model.body.eval()  # body eval
    return audit, losses


@pytest.fixture(scope="module")
def config() -> dict:
    audit, _ = _run()
    return audit.report.to_dict()["config"]


def _at(source: dict | None, marker: str) -> bool:
    return source is not None and source["file"] == __file__ and source["line"] == line_of(marker)


def test_the_optimizer_its_learning_rate_and_its_scheduler(config):
    (optimizer,) = config["optimizers"]
    assert optimizer["index"] == 0 and optimizer["kind"] == "Adam" and optimizer["name"] == "optimizer"
    assert optimizer["initial_lrs"] == [3e-4] and _at(optimizer["source"], "optimizer")
    ((low, high),) = optimizer["lr_range"]
    assert math.isclose(high, 3e-4) and math.isclose(low, 3e-4 * 0.5)
    scheduler = optimizer["scheduler"]
    assert scheduler["kind"] == "StepLR" and scheduler["step_calls"] == 4
    assert _at(scheduler["source"], "scheduler") and _at(scheduler["step_source"], "scheduler step")


def test_weights_inputs_and_dtypes(config):
    head = next(w for w in config["weights"] if w["module"].endswith("head") and w["param"] == "weight")
    assert head["kind"] == "linear" and head["shape"] == [1, 16] and head["fan_in"] == 16
    assert math.isclose(head["std"], 0.02, rel_tol=0.6) and _at(head["init_source"], "init")
    (raw,) = config["inputs"]
    assert raw["op"] == "linear" and raw["samples"] > 0 and _at(raw["made_source"], "inputs")
    assert 99 < raw["mean_abs_max"] < 101 and 0.5 < raw["std_median"] < 1.5 and 99 < raw["rms"] < 101
    assert config["casts"] == [] and config["dtypes"] == {"float32": 6}


def test_the_scripts_train_and_eval_calls_one_per_call_at_its_line():
    """One entry per call, not one per module it reaches; leaky's own switch of the batch norm to
    eval mode for LK306's probe (record/rerun.py) is not the script's."""
    audit, _ = _run()
    modes = audit.report.to_dict()["config"]["modes"]
    assert [(m["module"], m["type"], m["mode"], m["step"]) for m in modes] == [
        ("Net", "Net", "eval", 0), ("Net", "Net", "train", 0), ("body", "Sequential", "eval", 4)]
    assert [_at(m["source"], marker) for m, marker in zip(modes, ["eval", "train", "body eval"])] == [True] * 3
    assert [probe["batchnorm_eval"] for probe in audit.report.to_dict()["batch_probes"]] == [["body.1"]]


def train(model: nn.Module) -> None:
    """A script's own function named like the method: its line is where the call is."""
    model.train()  # own train


def test_a_call_inside_the_scripts_own_train_function_is_at_its_line():
    with leaky.audit() as audit:
        model = Net()
        train(model)
        model(torch.randn(8, 4)).sum().backward()
    (call,) = audit.report.to_dict()["config"]["modes"]
    assert call["mode"] == "train" and _at(call["source"], "own train")


def test_the_patch_is_gone_after_the_run_and_after_an_error():
    assert nn.Module.__dict__["train"] is _TRAIN
    _run(steps=1)
    assert nn.Module.__dict__["train"] is _TRAIN
    with pytest.raises(RuntimeError, match="the user's bug"):
        with leaky.audit():
            layer = nn.Linear(2, 2)
            assert layer.eval() is layer and not layer.training
            raise RuntimeError("the user's bug")
    assert nn.Module.__dict__["train"] is _TRAIN


def test_observed_calls_leave_the_modes_and_the_losses_as_torch_has_them():
    audit, losses = _run()
    _, plain = _run(audited=False)
    assert losses == plain and len(losses) == 4
