"""Examples after Karpathy's "A Recipe for Training Neural Networks" (2019): the checks an
expert runs by hand before trusting a run.

- batch independence (LK306): a sensor classifier whose time-major GRU is fed
  `x.view(T, B, F)` where `x.transpose(0, 1)` was meant, and its fix. The loss still
  falls: the GRU learns from strips cut across several recordings.

The loss-at-init examples (LK307) are in ``wiring``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leaky.zoo._base import Example, Expect, data_generator, fit

FILE = __file__
T, FEATURES, CLASSES = 12, 3, 4


class ActivityGRU(nn.Module):
    """Accelerometer recordings (B, T, 3), batch-first, into a time-major GRU."""

    def __init__(self, transpose: bool) -> None:
        super().__init__()
        self.rnn = nn.GRU(FEATURES, 32)   # time-major: it expects (T, B, F)
        self.head = nn.Linear(32, CLASSES)
        self.transpose = transpose

    def forward(self, x):
        b, t, f = x.shape
        if self.transpose:
            seq = x.transpose(0, 1)
        else:
            seq = x.view(t, b, f)  # LK306-view
        h, _ = self.rnn(seq)
        return self.head(h[-1])


def _recordings(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Four activities, told apart by which axis carries a slow oscillation."""
    gen = data_generator(seed)
    y = torch.randint(0, CLASSES, (n,), generator=gen)
    phase = torch.rand(n, 1, generator=gen) * 6.28
    wave = torch.sin(torch.arange(T, dtype=torch.float32)[None] * 0.7 + phase)      # (n, T)
    x = 0.3 * torch.randn(n, T, FEATURES, generator=gen)
    axis = y % FEATURES
    x[torch.arange(n), :, axis] += wave
    x[y == CLASSES - 1] += 0.8 * wave[y == CLASSES - 1, :, None]   # the fourth: all axes together
    return x, y


def _run(steps: int, seed: int, transpose: bool) -> list[float]:
    torch.manual_seed(seed)
    x_all, y_all = _recordings(512, seed)
    model = ActivityGRU(transpose)
    return fit(model, torch.optim.Adam(model.parameters(), lr=3e-3), x_all, y_all, F.cross_entropy, steps)


def run_gru_view_for_transpose(steps: int = 20, seed: int = 0) -> list[float]:
    return _run(steps, seed, transpose=False)


def run_gru_transpose(steps: int = 20, seed: int = 0) -> list[float]:
    return _run(steps, seed, transpose=True)


EXAMPLES = [
    Example("gru-view-for-transpose", "x.view(T, B, F) for x.transpose(0, 1) before a time-major GRU: every "
            "prediction mixes several recordings", run_gru_view_for_transpose, (Expect("LK306", "ActivityGRU", "LK306-view"),),
            healthy=False, fixed_by="gru-transpose", file=FILE),
    Example("gru-transpose", "The same GRU fed x.transpose(0, 1): one recording per sequence", run_gru_transpose,
            (), healthy=True, file=FILE),
]
