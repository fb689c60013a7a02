"""LK101 on a sigmoid or tanh that is one factor of a composite with its own input.

    swish(h) = h·σ(h)                          d/dh = σ(h) + h·σ(h)(1 − σ(h))
    gelu_tanh(h) = 0.5·h·(1 + tanh(u(h)))      d/dh = 0.5·(1 + t) + 0.5·h·(1 − t²)·u'(h)

With large pre-activations most of the tanh's (or σ's) unit-samples sit where its own derivative
is ~0, yet d/dh is ~1 (h > 0) or ~0 (h < 0): the gradient reaching h goes through the other
factor. Such a finding is info, judged by the composite's gain |dL/dh| / |dL/d(out)|, which is
checked against autograd on an identical run. A plain saturated sigmoid layer, and a gated unit
a·σ(b) whose gate b is computed apart from a (two halves of one layer's output), still fire."""
from __future__ import annotations

import inspect
import math

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.finding import Severity

STEPS = 10


def _composite(kind: str, h: torch.Tensor) -> torch.Tensor:
    if kind == "gelu":
        return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))  # line: gelu
    if kind == "swish":
        return h * torch.sigmoid(h)  # line: swish
    if kind == "sigmoid":
        return torch.sigmoid(h)  # line: sigmoid
    a, b = h.chunk(2, dim=-1)
    return torch.cat([a * torch.sigmoid(b), a], dim=-1)  # line: glu


def _line(kind: str) -> int:
    lines, start = inspect.getsourcelines(_composite)
    return start + next(i for i, text in enumerate(lines) if text.rstrip().endswith(f"# line: {kind}"))


class MLP(nn.Module):
    """fc1 at N(0, 3²) on 16 unit-variance inputs: pre-activations of std ~12, most of them
    far in the flat tails of σ and tanh (LK302's own finding, the scale, is not judged here)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(16, 64), nn.Linear(64, 64), nn.Linear(64, 4)
        nn.init.normal_(self.fc1.weight, std=3.0)
        self.kind = kind
        self.taps: list | None = None   # raw torch only: (h, out) of each call, for the oracle

    def forward(self, x):
        h = self.fc1(x)
        out = _composite(self.kind, h)
        if self.taps is not None:
            self.taps.append((h, out))
        return self.head(torch.relu(self.fc2(out)))


def _data():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=gen)
    return x, (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()


def _train(model: MLP, on_step=None) -> list[float]:
    x, y = _data()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(STEPS):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if on_step is not None:
            on_step()
        opt.step()
        losses.append(loss.item())
    return losses


def _audit(kind: str):
    torch.manual_seed(0)
    model = MLP(kind)
    with leaky.audit(steps=STEPS) as audit:
        losses = _train(model)
    return audit, losses


def _raw_gain(kind: str) -> tuple[float, list[float]]:
    """Autograd's |dL/dh| / |dL/d(out)| on the same run, geometric mean over its steps."""
    torch.manual_seed(0)
    model = MLP(kind)
    model.taps, logs = [], []

    def measure():
        (h, out), = model.taps
        model.taps.clear()
        logs.append(math.log10(h.grad.norm().item() / out.grad.norm().item()))

    def forward(x, forward=model.forward):
        y = forward(x)
        for h, out in model.taps:
            h.retain_grad()
            out.retain_grad()
        return y

    model.forward = forward
    losses = _train(model, measure)
    return 10 ** (sum(logs) / len(logs)), losses


def _finding(audit, kind: str):
    (finding,) = [f for f in audit.report.by_code("LK101") if f.source is not None and f.source.line == _line(kind)]
    return finding


def test_a_gelu_tanh_or_swish_with_saturated_tails_is_info_at_the_composites_gain():
    for kind in ("gelu", "swish"):
        audit, losses = _audit(kind)
        finding = _finding(audit, kind)
        assert finding.severity is Severity.INFO, (kind, finding.message)
        assert finding.evidence["flat_share"] >= 0.5                 # its own tails are flat ...
        assert finding.evidence["backward_gain"] < 0.05               # ... and pass little themselves
        gain, raw_losses = _raw_gain(kind)
        assert raw_losses == losses                                   # observation changed nothing
        assert gain > 0.3                                             # ... but the composite passes on most
        assert abs(finding.evidence["bypass_gain"] - gain) < 1e-4 * gain, (kind, finding.evidence["bypass_gain"], gain)
        assert "bypassed" in finding.message
        assert not [f for f in audit.report.by_code("LK101") if f.severity is not Severity.INFO]


def test_a_saturated_sigmoid_layer_still_fires_at_its_line():
    audit, _ = _audit("sigmoid")
    finding = _finding(audit, "sigmoid")
    assert finding.severity is not Severity.INFO and finding.evidence["flat_share"] >= 0.5
    assert "bypass_gain" not in finding.evidence


def test_a_gated_unit_whose_gate_saturates_still_fires():
    # a·σ(b), a and b the two halves of fc1's output: nothing goes around σ to b
    audit, _ = _audit("glu")
    finding = _finding(audit, "glu")
    assert finding.severity is not Severity.INFO and finding.evidence["flat_share"] >= 0.5
    assert "bypass_gain" not in finding.evidence
    gate = next(a for a in audit.stats.activations if a.source is not None and a.source.line == _line("glu"))
    assert gate.bypass_site is None
