"""LK307 loss-at-init: the first loss against what a neutral output layer scores, on real
models with real optimizers (broken: an over-confident head, regression targets of mean 50,
a 2%-positive label with its bias at 0; healthy: default heads, label smoothing, class
weights, a prior-initialised imbalanced classifier, standardised regression targets, a
GAN's constant labels); hand-built stats are in tests/unit/checks/test_lk307_loss_at_init.py."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.finding import Severity


def _train(model, x, loss_of, steps: int = 20, lr: float = 1e-3):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    with leaky.audit(steps=steps) as audit:
        for step in range(steps):
            rows = torch.arange(64) + 64 * (step % (len(x) // 64))
            loss = loss_of(model(x[rows]), rows)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit.report


def _alarms(report, code="LK307"):
    return [f for f in report.findings if f.code == code and f.severity is not Severity.INFO]


def _classifier():
    torch.manual_seed(0)
    x = torch.randn(1024, 32)
    y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4] > 0).long()
    return x, y, nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10))


def test_an_over_confident_head_starts_far_above_log_c():
    x, y, model = _classifier()
    with leaky.audit(steps=None) as audit:       # the init is seen: it is the cause
        nn.init.normal_(model[2].weight, std=1.0)  # OVER-CONFIDENT
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for step in range(10):
            loss = F.cross_entropy(model(x[:64]), y[:64])
            opt.zero_grad()
            loss.backward()
            opt.step()
    (finding,) = _alarms(audit.report)
    assert finding.module == "2" and finding.evidence["neutral_loss"] == pytest.approx(math.log(10))
    assert finding.evidence["ratio"] > 3
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# OVER-CONFIDENT" in text)
    assert finding.cause.line == line
    assert "head.weight.mul_(0.01)" in finding.fix and "head.bias.zero_()" in finding.fix


def test_a_head_without_a_bias_gets_no_line_that_touches_one():
    """A GPT-style head built with bias=False: the fix must not say head.bias.zero_(), which
    would raise (a helper's sweep met it on a tied-embedding language model)."""
    torch.manual_seed(0)
    x = torch.randn(1024, 32)
    y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4] > 0).long()
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10, bias=False))
    nn.init.normal_(model[2].weight, std=1.0)
    (finding,) = _alarms(_train(model, x, lambda out, rows: F.cross_entropy(out, y[rows]), steps=10))
    assert "head.weight.mul_(0.01)" in finding.fix and "bias" not in finding.fix


@pytest.mark.parametrize("kwargs", [{}, {"label_smoothing": 0.1}, {"weight": torch.linspace(0.5, 2.0, 10)}])
def test_a_default_head_starts_near_log_c(kwargs):
    x, y, model = _classifier()
    report = _train(model, x, lambda out, rows: F.cross_entropy(out, y[rows], **kwargs))
    assert _alarms(report) == []


def _regressor(mean: float, std: float):
    torch.manual_seed(0)
    x = torch.randn(1024, 8)
    t = mean + std * torch.tanh(x[:, :2].sum(1, keepdim=True))
    return x, t, nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))


def test_targets_of_mean_50_with_the_bias_at_0():
    x, t, model = _regressor(50.0, 2.0)
    (finding,) = _alarms(_train(model, x, lambda out, rows: F.mse_loss(out, t[rows]), lr=1e-2))
    assert finding.module == "2" and finding.evidence["ratio"] > 100
    assert "bias to the target mean 50" in finding.fix


@pytest.mark.parametrize("loss_fn", [F.mse_loss, F.l1_loss])
def test_standardised_targets_are_quiet(loss_fn):
    x, t, model = _regressor(0.0, 1.0)
    t = (t - t.mean()) / t.std()
    assert _alarms(_train(model, x, lambda out, rows: loss_fn(out, t[rows]))) == []


def _imbalanced(prior_bias: bool):
    torch.manual_seed(0)
    x = torch.randn(2048, 16)
    y = (x[:, 0] > 2.05).float()[:, None]          # ~2% positives
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    p = y.mean().item()
    with torch.no_grad():
        model[2].weight.mul_(0.1)
        model[2].bias.fill_(math.log(p / (1 - p)) if prior_bias else 0.0)
    return x, y, model


def test_a_rare_label_with_its_bias_at_0():
    x, y, model = _imbalanced(prior_bias=False)
    (finding,) = _alarms(_train(model, x, lambda out, rows: F.binary_cross_entropy_with_logits(out, y[rows])))
    assert "log(p / (1 − p))" in finding.fix and finding.evidence["neutral"] == "prior"


def test_a_prior_initialised_imbalanced_classifier_is_quiet():
    x, y, model = _imbalanced(prior_bias=True)
    assert _alarms(_train(model, x, lambda out, rows: F.binary_cross_entropy_with_logits(out, y[rows]))) == []


def test_constant_labels_are_not_judged():
    # a discriminator's all-ones labels: the neutral loss is 0, no ratio to it means anything
    x, _, model = _imbalanced(prior_bias=False)
    ones = torch.ones(len(x), 1)
    assert _alarms(_train(model, x, lambda out, rows: F.binary_cross_entropy_with_logits(out, ones[rows]))) == []
