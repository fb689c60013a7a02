"""Training loops that break over the steps rather than in the wiring: parameters the
optimizer never moves, learning rates far off, gradients never zeroed, a flat or rising
loss. And the healthy loops a naive tool confuses with them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leaky.zoo._base import Example, Expect, batches, data_generator, teacher_classification

FILE = __file__


class MLP(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(20, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, width)
        self.act2 = nn.ReLU()
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)
        x = self.fc2(x)
        x = self.act2(x)
        return self.head(x)


def _data(seed: int):
    gen = data_generator(seed)
    return teacher_classification(512, 20, 10, gen)


def _loop(model, opt, steps, seed, zero_every: int | None = 1, scheduler=None) -> list[float]:
    """The usual loop; zero_every=None never zeroes the gradients, k accumulates k batches."""
    x_all, y_all = _data(seed)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        if zero_every is not None and step % zero_every == 0:
            opt.zero_grad()
        loss = F.cross_entropy(model(x_all[rows]), y_all[rows])
        loss.backward()
        if zero_every is None or (step + 1) % zero_every == 0:
            opt.step()
            if scheduler is not None:
                scheduler.step()
        losses.append(loss.item())
    return losses


def run_head_added_after_optimizer(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.head = nn.Linear(64, 10)          # "swap in a fresh head" after building the optimizer
    return _loop(model, opt, steps, seed)


def run_lr_zero_group(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = MLP()
    opt = torch.optim.SGD([{"params": model.fc1.parameters(), "lr": 0.0},   # meant 1e-2
                           {"params": list(model.fc2.parameters()) + list(model.head.parameters())}],
                          lr=0.05, momentum=0.9)
    return _loop(model, opt, steps, seed)


def run_all_lr_zero(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.0)   # a schedule bug: always 0
    return _loop(model, opt, steps, seed, scheduler=scheduler)


def run_lr_too_high(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=0.3)
    return _loop(model, opt, steps, seed)


def run_lr_too_low(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-9)
    return _loop(model, opt, steps, seed)


def run_never_zeroed(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return _loop(model, opt, steps, seed, zero_every=None)


def run_regression_diverges(steps: int = 20, seed: int = 0) -> list[float]:
    """Plain SGD on unscaled regression targets with lr past the stability limit 2/h."""
    torch.manual_seed(seed)
    gen = data_generator(seed)
    x_all = torch.randn(512, 20, generator=gen) * 3
    y_all = x_all @ torch.randn(20, 1, generator=gen)
    model = nn.Sequential(nn.Linear(20, 32), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        opt.zero_grad()
        loss = F.mse_loss(model(x_all[rows]), y_all[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run_accumulate_four(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    return _loop(model, opt, 4 * steps, seed, zero_every=4)


def run_warmup_schedule(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = MLP()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 10))
    return _loop(model, opt, steps, seed, scheduler=scheduler)


def run_high_lr_momentum(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    return _loop(model, opt, steps, seed)


def _broken(name, title, run, *expect):
    return Example(name, title, run, tuple(expect), healthy=False, file=FILE)


def _healthy(name, title, run):
    return Example(name, title, run, (), healthy=True, file=FILE)


EXAMPLES = [
    _broken("head-added-after-optimizer", "A new head assigned after the optimizer was built",
            run_head_added_after_optimizer, Expect("LK201", "head", None)),
    _broken("lr-zero-group", "fc1's param group has lr = 0", run_lr_zero_group, Expect("LK201", "fc1", None)),
    _broken("scheduler-lr-zero", "A LambdaLR that sets every lr to 0: nothing trains",
            run_all_lr_zero, Expect("LK201", "fc1", None), Expect("LK204", None, None)),
    _broken("adam-lr-too-high", "Adam with lr = 0.3", run_lr_too_high, Expect("LK202", None, None)),
    _broken("sgd-lr-too-low", "SGD with lr = 1e-9", run_lr_too_low, Expect("LK202", None, None)),
    _broken("never-zeroed", "optimizer.zero_grad() is never called", run_never_zeroed, Expect("LK203", None, None)),
    _broken("regression-diverges", "SGD past the stability limit on unscaled regression",
            run_regression_diverges, Expect("LK205", None, None)),
    _healthy("accumulate-four", "Gradient accumulation over 4 micro-batches, zeroed every 4",
             run_accumulate_four),
    _healthy("warmup-schedule", "AdamW with a linear warmup from lr ~ 0", run_warmup_schedule),
    _healthy("high-lr-momentum", "SGD lr 0.1 with Nesterov momentum 0.9", run_high_lr_momentum),
]
