"""Healthy models a naive tool would misread, and mechanisms the zoo does not cover."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.demo import serious
from leaky.derive.recurrence import _radius


class PeakedAttention(nn.Module):
    """One attention layer whose softmax is sharp by construction (large score scale)."""

    def __init__(self, d=16, scale=50.0):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, 4)
        self.scale = scale

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) * self.scale
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        return self.out((x + attn @ v).mean(1))


def _train(model, make_batch, steps=10, lr=1e-3):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    with leaky.audit() as audit:
        for step in range(steps):
            x, y = make_batch(step)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit


def test_causal_attention_peaked_by_a_score_factor_from_its_first_step_is_only_lk101():
    # Peaked by construction (scores x 50 at init), not by learning: its scores get ~no
    # gradient from the first step, which LK101 reports at the softmax (the issue "saturated
    # softmax in LK101"). Attention that learns to be peaked stays quiet:
    # tests/unit/checks/test_softmax_saturation.py.
    model = PeakedAttention()
    gen = torch.Generator().manual_seed(0)
    audit = _train(model, lambda s: (torch.randn(8, 12, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)))
    softmax = next(a for a in audit.stats.activations if a.family == "softmax")
    assert softmax.peaked_share > 0.5 and softmax.first_flat_share > 0.5
    assert [(f.code, f.op) for f in serious(audit.report.findings)] == [("LK101", "softmax")]


def test_relu_mlp_with_some_inactive_units_is_quiet():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 100), nn.ReLU(), nn.Linear(100, 3))
    with torch.no_grad():
        model[0].bias[:15] = -100.0               # 15% of the units can never fire
    gen = torch.Generator().manual_seed(0)
    audit = _train(model, lambda s: (torch.randn(64, 10, generator=gen), torch.randint(0, 3, (64,), generator=gen)))
    relu = next(a for a in audit.stats.activations if a.family == "relu")
    assert relu.dead_units >= 15
    assert audit.report.by_code("LK102") == []


def test_few_samples_are_not_enough_to_call_units_dead():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3))
    with torch.no_grad():
        model[0].bias[:] = -100.0                 # all dead, but only 2 samples seen
    audit = _train(model, lambda s: (torch.randn(2, 10), torch.randint(0, 3, (2,))), steps=1)
    assert audit.report.by_code("LK102") == []


class LoopRNN(nn.Module):
    def __init__(self, scale, hidden=32):
        super().__init__()
        self.w_ih = nn.Parameter(torch.randn(8, hidden) * 0.1)
        q, _ = torch.linalg.qr(torch.randn(hidden, hidden))
        self.w_hh = nn.Parameter(q * scale)
        self.head = nn.Linear(hidden, 3)

    def forward(self, x):
        h = torch.zeros(x.shape[0], self.w_hh.shape[0])
        for t in range(x.shape[1]):
            h = torch.tanh(x[:, t] @ self.w_ih + h @ self.w_hh)  # RECURRENCE
        return self.head(h)


def _recurrence_line() -> int:
    with open(__file__, encoding="utf-8") as handle:
        return next(i for i, line in enumerate(handle, 1) if "# RECURRENCE" in line)


@pytest.mark.parametrize("scale, severity, what", [(2.0, "error", "grows"), (1.0, None, None),
                                                   (0.3, "warning", "shrinks")])
def test_hand_written_recurrence(scale, severity, what):
    torch.manual_seed(0)
    model = LoopRNN(scale)
    gen = torch.Generator().manual_seed(0)
    audit = _train(model, lambda s: (torch.randn(16, 40, 8, generator=gen), torch.randint(0, 3, (16,), generator=gen)),
                   steps=3, lr=1e-4)
    (rec,) = audit.stats.recurrences
    assert rec.kind == "loop" and rec.param == "w_hh"
    assert math.isclose(rec.spectral_radius, scale, rel_tol=1e-3)
    assert len(rec.profile) >= 39
    found = audit.report.by_code("LK105")
    if severity is None:
        assert found == []
    else:
        (finding,) = found
        assert finding.severity.value == severity and what in finding.message
        assert finding.source.line == _recurrence_line()


def test_radius_estimate_for_large_matrices_matches_the_exact_value():
    torch.manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(700, 700, dtype=torch.float64))
    for scale in (0.5, 1.3):
        assert math.isclose(_radius(q * scale), scale, rel_tol=1e-2)


def test_clamp_on_a_prediction_only_under_no_grad_is_quiet():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with leaky.audit() as audit:
        for _ in range(5):
            x, y = torch.randn(32, 4), torch.randn(32, 1) * 5
            pred = model(x)
            loss = F.mse_loss(pred, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                clipped = pred.clamp(-1, 1)   # a metric, never on the gradient path
                _ = (clipped - y).abs().mean()
    assert audit.report.by_code("LK106") == []


def test_autograd_backward_without_tensor_backward_is_still_observed():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with leaky.audit() as audit:
        for _ in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            torch.autograd.backward(loss)
            opt.step()
    assert audit.stats.steps == 3
    assert all(p.grad_steps == 3 for p in audit.stats.params)


def test_a_square_input_weight_is_not_mistaken_for_the_recurrent_one():
    class Loop(nn.Module):
        def __init__(self):
            super().__init__()
            self.w_ih = nn.Parameter(0.1 * torch.eye(4))
            q, _ = torch.linalg.qr(torch.randn(4, 4))
            self.w_hh = nn.Parameter(0.6 * q)
            self.head = nn.Linear(4, 3)

        def forward(self, x):
            h = x.new_zeros(x.shape[0], 4)
            for t in range(x.shape[1]):
                h = torch.tanh(x[:, t] @ self.w_ih + h @ self.w_hh)   # two matmuls, one line
            return self.head(h)

    torch.manual_seed(0)
    model = Loop()
    gen = torch.Generator().manual_seed(0)
    audit = _train(model, lambda s: (torch.randn(8, 30, 4, generator=gen), torch.randint(0, 3, (8,), generator=gen)),
                   steps=3, lr=1e-2)
    (rec,) = audit.stats.recurrences
    assert rec.param == "w_hh" and len(rec.profile) == 30
    assert audit.report.by_code("LK105") == []
