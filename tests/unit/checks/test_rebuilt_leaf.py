"""LK108 at the line that rebuilds a prediction (or inputs) as a new leaf with requires_grad=True.

Real models, backward passes and optimizers for the broken scripts and their healthy
look-alikes; hand-built stats for the check's choice of cut.
"""
from __future__ import annotations

import inspect

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.finding import Severity
from leaky.testing import cut, param, source, stats
from tests.check_cases import findings_of, fires, quiet


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    (offset,) = [i for i, line in enumerate(lines) if text in line]
    return start + offset


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))


def _train(step, steps: int = 5, params=None, model=None):
    model = model or _mlp()
    opt = torch.optim.SGD(params if params is not None else model.parameters(), lr=0.05)
    torch.manual_seed(1)
    with leaky.audit(steps=steps) as audit:
        for _ in range(steps):
            x, y = torch.randn(32, 4), torch.randn(32)
            loss = step(model, x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert audit.report.run["internal_error"] is None
    return audit.report


# -- broken: the prediction rebuilt from detached values -------------------------------------------
def _from_numpy(model, x, y):
    pred = torch.tensor(model(x).squeeze(-1).detach().numpy(), requires_grad=True)
    return F.mse_loss(pred, y)


def _from_floats(model, x, y):
    values = [model(row).item() for row in x]
    pred = torch.tensor(values, requires_grad=True)
    return F.mse_loss(pred, y)


def _requires_grad_(model, x, y):
    pred = torch.from_numpy(model(x).squeeze(-1).detach().numpy().copy()).requires_grad_()
    return F.mse_loss(pred, y)


def test_a_prediction_rebuilt_with_torch_tensor_is_found_at_its_line():
    report = _train(_from_numpy)
    findings = report.by_code("LK108")
    line = _line_of(_from_numpy, "requires_grad=True")
    assert {f.module for f in findings} == {"0", "2"}
    for finding in findings:
        assert finding.severity is Severity.ERROR and finding.source.line == line
        assert (finding.cause.line, finding.cause.what) == (line, "the prediction rebuilt from detached values here")
        assert "the loss reaches the prediction, rebuilt here as a new tensor with requires_grad=True" in finding.message


def test_floats_taken_by_item_name_the_item_line_and_point_at_the_rebuild():
    (first, *_) = _train(_from_floats).by_code("LK108")
    assert first.source.line == first.cause.line == _line_of(_from_floats, "requires_grad=True")
    assert f".item() at line {_line_of(_from_floats, '.item()')}" in first.message


def test_from_numpy_then_requires_grad_is_the_same_cut():
    (first, *_) = _train(_requires_grad_).by_code("LK108")
    assert first.source.line == _line_of(_requires_grad_, "requires_grad_()")
    assert first.cause is not None


class EncoderHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(4, 16)
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        features = self.encoder(x).detach().requires_grad_()
        return self.head(torch.tanh(features)).squeeze(-1)


def test_inputs_of_a_head_rebuilt_from_an_encoder_cut_its_encoder_off():
    torch.manual_seed(0)
    report = _train(lambda m, x, y: F.mse_loss(m(x), y), model=EncoderHead())
    (finding,) = report.by_code("LK108")
    assert finding.module == "encoder"
    assert finding.source.line == _line_of(EncoderHead.forward, "requires_grad_()")
    assert finding.cause.what == "inputs built here"


# -- healthy look-alikes ---------------------------------------------------------------------------
def test_inputs_built_from_data_with_or_without_requires_grad_are_quiet():
    def step(model, x, y):
        data = torch.tensor(x.numpy(), requires_grad=False)
        probe = torch.tensor(np.asarray(x), requires_grad=True)     # inputs whose gradient is read (saliency)
        return F.mse_loss(model(data).squeeze(-1) + 0 * model(probe).squeeze(-1), torch.tensor(y.tolist()))
    report = _train(step)
    assert report.by_code("LK108") == []


def test_a_raw_tensor_optimised_directly_is_quiet():
    """A temperature and an image trained on purpose, through a frozen network."""
    torch.manual_seed(0)
    frozen = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 1))
    frozen.requires_grad_(False)
    image = torch.rand(1, 3, 8, 8, requires_grad=True)
    temperature = torch.tensor(1.0, requires_grad=True)
    opt = torch.optim.Adam([image, temperature], lr=0.01)
    with leaky.audit(steps=5) as audit:
        for _ in range(5):
            loss = (frozen(image) / temperature - 3.0).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert audit.report.run["internal_error"] is None
    assert audit.report.by_code("LK108") == []


def test_a_frozen_backbone_with_a_trained_head_is_quiet():
    torch.manual_seed(0)
    model = EncoderHead()
    model.encoder.requires_grad_(False)

    def step(m, x, y):
        return F.mse_loss(m.head(torch.tanh(m.encoder(x))).squeeze(-1), y)
    assert _train(step, model=model, params=model.head.parameters()).by_code("LK108") == []


# -- hand-built stats ------------------------------------------------------------------------------
def _cut_off(*cuts, trained: bool = False):
    params = (param(name="fc.weight", grad_steps=0), param(name="other.weight", grad_steps=5 if trained else 0))
    return stats(steps=5, params=params, cuts=cuts, modules_ran=frozenset({"fc", "other"}))


def test_unit_a_rebuilt_prediction_explains_every_cut_off_parameter_when_nothing_trained():
    rebuilt = cut(kind="rebuilt_leaf:prediction", producer=(), source=source(line=12))
    item = cut(kind="item", producer=("fc",), source=source(line=11))
    finding = next(f for f in findings_of("LK108", _cut_off(item, rebuilt)) if f.module == "fc")
    assert finding.source.line == 12 and finding.cause.line == 12
    assert ".item() at line 11" in finding.message


def test_unit_a_rebuilt_leaf_of_unknown_origin_does_not_explain_a_cut_when_other_parameters_train():
    rebuilt = cut(kind="rebuilt_leaf:inputs", producer=(), source=source(line=12))
    detach = cut(kind="detach", producer=("fc",), source=source(line=20))
    finding = fires("LK108", _cut_off(rebuilt, detach, trained=True))
    assert finding.source.line == 20 and finding.cause.line == 20   # the detach, not the rebuilt leaf


def test_unit_a_rebuilt_leaf_with_nothing_cut_off_is_quiet():
    rebuilt = cut(kind="rebuilt_leaf:prediction", producer=(), source=source(line=12))
    quiet("LK108", stats(steps=5, params=(param(name="fc.weight", grad_steps=5),), cuts=(rebuilt,)))

