"""LK101 on softmax: one-hot rows from the first step (unscaled attention scores, logits
multiplied by a temperature) are found at the softmax's line, with the scores' line as the
cause; attention that learns to be peaked, scaled attention, SDPA and a confident classifier
stay quiet. The row measure is checked against autograd's Jacobian."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.finding import Severity
from leaky.record.activations import jacobian_share

VOCAB, T, D = 32, 8, 64


class Attention(nn.Module):
    """One head of d_head = 64 over token + position embeddings (variance 2), no LayerNorm."""

    def __init__(self, mode: str, prenorm: bool = False) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(T, D)
        self.norm = nn.LayerNorm(D) if prenorm else nn.Identity()
        self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
        self.head = nn.Linear(D, VOCAB)
        if not prenorm:
            for layer in (self.q, self.k, self.v):
                nn.init.xavier_normal_(layer.weight)
        self.mode = mode

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        h = self.norm(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        if self.mode == "sdpa":
            return self.head(x + F.scaled_dot_product_attention(q, k, v))
        scores = q @ k.transpose(-2, -1)
        if self.mode == "scaled":
            scores = scores / math.sqrt(D)
        if self.mode == "times":
            scores = scores * math.sqrt(D)            # the temperature multiplied, meant to divide
        probs = F.softmax(scores, dim=-1)
        return self.head(x + probs @ v)


SCORE_LINE = {"unscaled": 42, "scaled": 44, "times": 46}
SOFTMAX_LINE = 47


def _train(model, steps=20):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    with leaky.audit() as audit:
        for _ in range(steps):
            idx = torch.randint(0, VOCAB, (16, T), generator=gen)
            loss = F.cross_entropy(model(idx).reshape(-1, VOCAB), idx.roll(1, 1).reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit


def _lk101(audit):
    return [f for f in audit.report.by_code("LK101") if f.severity is not Severity.INFO]


def test_unscaled_attention_scores_are_found_at_the_softmax_with_the_scores_as_cause():
    torch.manual_seed(0)
    audit = _train(Attention("unscaled"))
    (finding,) = _lk101(audit)
    assert finding.op == "softmax" and finding.source.line == SOFTMAX_LINE
    assert finding.source.file.endswith("test_softmax_saturation.py")
    assert finding.cause is not None and finding.cause.line == SCORE_LINE["unscaled"]
    assert finding.evidence["first_step_flat_row_share"] >= 0.5
    assert finding.evidence["first_step_jacobian_share"] < 0.2


def test_a_temperature_multiplied_instead_of_divided_is_found():
    torch.manual_seed(0)
    audit = _train(Attention("times", prenorm=True))   # LayerNorm and default init: only the factor saturates
    (finding,) = _lk101(audit)
    assert finding.source.line == SOFTMAX_LINE and finding.cause.line == SCORE_LINE["times"]
    assert finding.evidence["first_step_flat_row_share"] >= 0.5


def test_scaled_attention_and_sdpa_are_quiet():
    for mode in ("scaled", "sdpa"):
        torch.manual_seed(0)
        audit = _train(Attention(mode))
        assert _lk101(audit) == [], mode
    torch.manual_seed(0)
    softmax = next(a for a in _train(Attention("scaled")).stats.activations if a.family == "softmax")
    assert softmax.first_flat_share < 0.05 and softmax.first_jacobian_share > 0.5


def _h05():
    path = Path(__file__).parents[3] / "benchmarks/zoo/h05-prenorm-transformer-copy/train.py"
    spec = importlib.util.spec_from_file_location("h05_train", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_prenorm_transformer_that_learned_one_hot_attention_is_quiet():
    torch.manual_seed(0)
    with leaky.audit(steps=None) as audit:
        losses, _ = _h05().main(150, verbose=False)
    assert losses[-1] < 0.05                                  # it learned to copy...
    first_layer = next(a for a in audit.stats.activations if a.module == "blocks.0.attn")
    assert first_layer.peaked_share > 0.4                     # ...by attending to one position
    assert first_layer.first_flat_share < 0.05               # and started spread
    assert _lk101(audit) == []


def test_a_confident_softmax_classifier_into_nll_is_quiet():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
    x = torch.randn(512, 20)
    y = x[:, :10].argmax(1)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    with leaky.audit(steps=None) as audit:
        for _ in range(200):
            probs = F.softmax(net(x), dim=1)
            loss = F.nll_loss(torch.log(probs + 1e-9), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert (probs.max(1).values > 0.99).float().mean() > 0.5   # confident
    assert _lk101(audit) == []


def test_the_row_share_is_the_trace_of_autograds_jacobian_over_its_uniform_value():
    torch.manual_seed(0)
    z = torch.randn(5, 7) * 3
    z[0, 3:] = float("-inf")                                  # a masked row: 3 entries it can move in
    z[1, 1:] = float("-inf")                                  # one entry left: nothing to lose
    p = torch.softmax(z, dim=-1)
    share, movable = jacobian_share(p, -1)
    for row in range(5):
        live = torch.isfinite(z[row])
        jac = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, -1), z[row][live])
        n = int(live.sum())
        if n > 1:
            assert torch.allclose(share[row], torch.trace(jac) / (1 - 1 / n), atol=1e-5)
            # J is positive semidefinite: its largest eigenvalue is at most its trace
            assert torch.linalg.eigvalsh(jac).max() <= torch.trace(jac) + 1e-6
    assert movable.tolist() == [True, False, True, True, True]
    # over two entries the share is the sigmoid's s(1 - s) / (1/4)
    pair = torch.softmax(torch.tensor([[2.0, -1.0]]), -1)
    s = torch.sigmoid(torch.tensor(3.0))
    assert torch.allclose(jacobian_share(pair, -1)[0][0], s * (1 - s) / 0.25)
