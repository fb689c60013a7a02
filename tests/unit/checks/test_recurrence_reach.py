"""LK105's vanishing side on real recurrences: how far back the gradient reaches.

A hand-written tanh RNN whose W_hh has spectral radius ~0.3, with a label set by an early
time step, gets no gradient there (exactly 0 in float32) and stays at chance: LK105 at the
recurrence's line, with the steps reached against the sequence length and a cause at the
line that initialised W_hh; LK204 names it. Look-alikes whose gradient also fades stay
quiet: gated cells (GRU, LSTM) over 100 steps, a small-radius RNN whose labels sit in its
last steps (the loss falls: info at most), an orthogonal W_hh (rho = 1).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.demo import serious
from leaky.finding import Severity

HIDDEN = 32


class LoopRNN(nn.Module):
    """h_t = tanh(x_t U + h_{t-1} W + b), read at the last step."""

    def __init__(self, radius: float | None, d_in: int = 4, orthogonal: bool = False):
        super().__init__()
        self.U = nn.Parameter(torch.randn(d_in, HIDDEN) / d_in ** 0.5)
        self.W = nn.Parameter(torch.empty(HIDDEN, HIDDEN))
        if orthogonal:
            nn.init.orthogonal_(self.W)  # INIT-ORTHOGONAL
        else:
            nn.init.normal_(self.W, std=radius / HIDDEN ** 0.5)  # INIT-SMALL
        self.b = nn.Parameter(torch.zeros(HIDDEN))
        self.head = nn.Linear(HIDDEN, 2)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], HIDDEN)
        for t in range(x.shape[1]):
            h = torch.tanh(x[:, t] @ self.U + h @ self.W + self.b)  # RECURRENCE
        return self.head(h)


class Gated(nn.Module):
    def __init__(self, cell: type[nn.RNNBase], d_in: int = 4):
        super().__init__()
        self.rnn = cell(d_in, HIDDEN, batch_first=True)  # BUILT
        self.head = nn.Linear(HIDDEN, 2)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def _line(marker: str) -> int:
    with open(__file__, encoding="utf-8") as handle:
        return next(i for i, line in enumerate(handle, 1) if f"# {marker}" in line)


def _train(make_model, seq: int, label_step: int, steps: int = 20, lr: float = 1e-3, batch: int = 32):
    """Label: the sign of feature 0 at `label_step` (negative: counted from the end)."""
    gen = torch.Generator().manual_seed(0)
    with leaky.audit(steps=steps) as audit:
        model = make_model()              # built inside the audit: its init lines are seen
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        for _ in range(steps):
            x = torch.randn(batch, seq, 4, generator=gen)
            y = (x[:, label_step, 0] > 0).long()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit


@pytest.mark.parametrize("radius", [0.3, 0.6])   # 0.6: above radius_low, rho^49 ~ 1e-11 still
def test_small_radius_loop_with_an_early_label_vanishes_before_the_signal(radius):
    torch.manual_seed(0)
    audit = _train(lambda: LoopRNN(radius), seq=50, label_step=1)
    (finding,) = audit.report.by_code("LK105")
    assert finding.severity is Severity.WARNING
    assert finding.source.line == _line("RECURRENCE") and finding.source.file == __file__
    assert finding.cause is not None and (finding.cause.file, finding.cause.line) == (__file__, _line("INIT-SMALL"))
    ev = finding.evidence
    assert ev["time_steps"] == 50 and ev["entry_step"] == 49        # the loss reads the last step
    assert ev["steps_reached"] < 10                                   # of 50
    assert ev["first_step_share"] < 1e-9
    if radius < 0.5:                                                  # underflowed to exactly 0
        assert ev["zero_steps"] > 0 and ev["first_step_share"] == 0.0 and "get exactly 0" in finding.message
    assert ev["spectral_radius"] < 1 and ev["decay_per_step"] < ev["spectral_radius"]
    assert f"reaches back only {ev['steps_reached']} of the 50 time steps" in finding.message
    assert "the loss reads the final state" in finding.message
    assert "loss falls" in finding.message or "loss is flat" in finding.message
    assert finding.evidence["loss_relative_drop"] < 0.1                # at chance (log 2), give or take

def test_default_rnn_over_a_hundred_steps_with_an_early_label_is_named_by_the_flat_loss():
    # PyTorch's default init (uniform ±1/sqrt(hidden)) gives rho ~ 0.58: over 100 steps the
    # gradient is gone long before the label's step 2
    torch.manual_seed(0)
    audit = _train(lambda: Gated(nn.RNN), seq=100, label_step=2, batch=16)
    (finding,) = audit.report.by_code("LK105")
    assert finding.severity is Severity.WARNING and finding.module == "rnn"
    assert finding.evidence["steps_reached"] < 20 and finding.evidence["zero_steps"] > 0
    assert finding.cause is not None and finding.cause.line == _line("BUILT")
    (flat,) = audit.report.by_code("LK204")
    assert flat.severity is Severity.WARNING and flat.evidence["explained_by"] == ["LK105"]


def test_orthogonal_recurrent_weight_is_not_called_vanishing():
    torch.manual_seed(0)
    audit = _train(lambda: LoopRNN(None, orthogonal=True), seq=50, label_step=1)
    (rec,) = audit.stats.recurrences
    assert abs(rec.spectral_radius - 1) < 0.05 and len(rec.profile) == 50
    assert audit.report.by_code("LK105") == []


def test_small_radius_loop_whose_labels_sit_in_its_last_steps_is_at_most_info():
    # NOTE: the gradient fades exactly as in the broken case, but the label is the last
    # step's input: the loss falls, so what the model needs is within its reach.
    torch.manual_seed(0)
    audit = _train(lambda: LoopRNN(0.3), seq=50, label_step=-1, lr=1e-2)
    (finding,) = audit.report.by_code("LK105")
    assert finding.severity is Severity.INFO and finding.evidence["steps_reached"] < 50
    assert finding.evidence["loss_relative_drop"] >= 0.1
    assert serious(audit.report.findings) == [], [f.message for f in serious(audit.report.findings)]


def test_gated_cells_over_a_hundred_steps_stay_quiet():
    for cell in (nn.GRU, nn.LSTM):
        torch.manual_seed(0)
        audit = _train(lambda: Gated(cell), seq=100, label_step=-3, lr=1e-2, batch=16)
        assert audit.report.by_code("LK105") == [], cell
        assert serious(audit.report.findings) == [], (cell, [f.message for f in serious(audit.report.findings)])
