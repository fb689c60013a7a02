"""The two records every zoo module fills in, plus tiny synthetic-data helpers.

Kept apart from ``leaky/zoo/__init__.py`` so the theme modules can import them without a
circular import. Everything here is plain torch; no downloads, no files.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor


@dataclass(frozen=True)
class Expect:
    """One finding an example must produce."""

    code: str            # e.g. "LK106"
    module: str | None   # dotted path from model.named_modules(); None: not module-located
    marker: str | None   # the finding's line is the one holding the comment "# <marker>"


@dataclass(frozen=True)
class Example:
    """A small, deterministic training run with a known verdict."""

    name: str
    title: str
    run: Callable[..., list[float]]   # run(steps=20, seed=0) -> one float loss per optimizer step
    expect: tuple[Expect, ...]
    healthy: bool
    fixed_by: str | None = None       # broken examples: the healthy example that fixes them
    file: str = ""                    # absolute path of the defining module
    raises: bool = False              # the user's script itself fails (leaky must still explain why)


def data_generator(seed: int) -> torch.Generator:
    """A generator for the data, separate from the global RNG that initialises the model."""
    return torch.Generator().manual_seed(10_000 + seed)


def teacher_classification(n: int, d: int, k: int, gen: torch.Generator,
                           hidden: int = 32) -> tuple[Tensor, Tensor]:
    """Standardised inputs ``[n, d]`` and labels ``[n]`` from a random two-layer teacher.

    Every class is present and the labels are a smooth function of the inputs, so a small
    MLP fits them quickly.
    """
    x = torch.randn(n, d, generator=gen)
    w1 = torch.randn(d, hidden, generator=gen) / d ** 0.5
    w2 = torch.randn(hidden, k, generator=gen) / hidden ** 0.5
    logits = torch.tanh(x @ w1) @ w2
    y = logits.argmax(dim=1)
    return x, y


def batches(n: int, batch: int, step: int) -> slice:
    """The slice of a fixed dataset of ``n`` rows used on ``step`` (cycles through it)."""
    per_epoch = n // batch
    start = (step % per_epoch) * batch
    return slice(start, start + batch)


def fit(model, opt, x_all, y_all, loss_fn, steps: int, batch: int = 64, clip: float | None = None) -> list[float]:
    """The plain loop: one batch of the fixed dataset per step (`batches`), zero_grad,
    backward, the gradient norm clipped to `clip` if given, step; returns the losses."""
    losses = []
    for step in range(steps):
        rows = batches(len(x_all), batch, step)
        opt.zero_grad()
        loss = loss_fn(model(x_all[rows]), y_all[rows])
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return losses
