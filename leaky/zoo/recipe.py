"""Examples after Karpathy's "A Recipe for Training Neural Networks" (2019): the checks an
expert runs by hand before trusting a run.

- batch independence (LK306): a sensor classifier whose time-major GRU is fed
  `x.view(T, B, F)` where `x.transpose(0, 1)` was meant, and its fix. The loss still
  falls: the GRU learns from strips cut across several recordings.
- overfit one batch (LK308, `leaky probe`): a regression head that kept the hidden
  layers' ReLU, on standardised targets of which half are negative, and its fix.
- input-independent baseline (LK309, `leaky probe`): raw readings clamped to [0, 1] as
  if already scaled, so that every sample is all ones, and its fix.

The loss-at-init examples (LK307) are in ``wiring``. The probe examples run the steps
they are asked for (`leaky probe --example NAME` asks for K + H + 1).
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


class OffsetRegressor(nn.Module):
    """Standardised 2-D offsets from 16 features; `head_relu` keeps the hidden layers' ReLU."""

    def __init__(self, head_relu: bool) -> None:
        super().__init__()
        self.hidden = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        if head_relu:
            self.out = nn.Sequential(nn.Linear(64, 2), nn.ReLU())  # LK308-out
        else:
            self.out = nn.Sequential(nn.Linear(64, 2))

    def forward(self, x):
        return self.out(self.hidden(x))


def _run_offsets(steps: int, seed: int, head_relu: bool) -> list[float]:
    torch.manual_seed(seed)
    gen = data_generator(seed)
    x_all = torch.randn(1024, 16, generator=gen)
    y_all = torch.tanh(x_all[:, :4] @ torch.randn(4, 2, generator=gen))
    y_all = (y_all - y_all.mean(0)) / y_all.std(0)      # standardised: about half negative
    model = OffsetRegressor(head_relu)
    return fit(model, torch.optim.Adam(model.parameters(), lr=1e-3), x_all, y_all, F.mse_loss, steps)


def run_regression_relu_output(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_offsets(steps, seed, head_relu=True)


def run_regression_linear_output(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_offsets(steps, seed, head_relu=False)


def _preprocess(readings: torch.Tensor, scaled: bool) -> torch.Tensor:
    if scaled:
        readings = (readings - 100.0) / 400.0
    return readings.clamp(0.0, 1.0)  # LK309-clamp


def _run_readings(steps: int, seed: int, scaled: bool) -> list[float]:
    """Vibration readings of a few hundred units, four fault classes."""
    torch.manual_seed(seed)
    gen = data_generator(seed)
    y_all = torch.randint(0, CLASSES, (1024,), generator=gen)
    centers = 300.0 + 60.0 * torch.randn(CLASSES, 12, generator=gen)
    x_all = _preprocess(centers[y_all] + 25.0 * torch.randn(1024, 12, generator=gen), scaled)
    model = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    return fit(model, torch.optim.Adam(model.parameters(), lr=1e-3), x_all, y_all, F.cross_entropy, steps)


def run_readings_clamped_raw(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_readings(steps, seed, scaled=False)


def run_readings_scaled(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_readings(steps, seed, scaled=True)


EXAMPLES = [
    Example("gru-view-for-transpose", "x.view(T, B, F) for x.transpose(0, 1) before a time-major GRU: every "
            "prediction mixes several recordings", run_gru_view_for_transpose, (Expect("LK306", "ActivityGRU", "LK306-view"),),
            healthy=False, fixed_by="gru-transpose", file=FILE),
    Example("gru-transpose", "The same GRU fed x.transpose(0, 1): one recording per sequence", run_gru_transpose,
            (), healthy=True, file=FILE),
    Example("regression-relu-output", "A ReLU after the output layer of a regression on standardised targets: "
            "even one batch cannot be fitted (leaky probe)", run_regression_relu_output,
            (Expect("LK308", "out.1", "LK308-out"), Expect("LK301", "out.1", "LK308-out")), healthy=False,
            fixed_by="regression-linear-output", file=FILE),
    Example("regression-linear-output", "The same regression with a linear output layer", run_regression_linear_output,
            (), healthy=True, file=FILE),
    Example("readings-clamped-raw", "Raw readings (hundreds) clamped to [0, 1] as if scaled: every sample is all "
            "ones (leaky probe)", run_readings_clamped_raw, (Expect("LK309", None, "LK309-clamp"),), healthy=False,
            fixed_by="readings-scaled", file=FILE),
    Example("readings-scaled", "The same readings scaled to [0, 1] before the clamp", run_readings_scaled, (),
            healthy=True, file=FILE),
]
