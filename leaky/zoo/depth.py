"""Broken examples: deep plain MLPs whose per-layer gain is far from 1.

With weights drawn from N(0, (g / sqrt(fan_in))^2) each layer multiplies the backward
signal by about g, so over 11 layer-to-layer steps the gradient entering the first layer
is about g^11 times the one entering the last: 3^11 ~ 1.8e5 (exploding), 0.3^11 ~ 1.8e-6
(vanishing). Neither finding is tied to one module or line.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leaky.zoo._base import Example, Expect, batches, data_generator, teacher_classification

FILE = __file__


class DeepMLP(nn.Module):
    """``depth`` Linear layers, width ``width``, optional tanh between them."""

    def __init__(self, d_in: int = 32, width: int = 64, classes: int = 10, depth: int = 12,
                 gain: float = 1.0, tanh: bool = True) -> None:
        super().__init__()
        dims = [d_in] + [width] * (depth - 1) + [classes]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.tanh = tanh
        for layer in self.layers:
            nn.init.normal_(layer.weight, mean=0.0, std=gain / layer.in_features ** 0.5)

    def forward(self, x):
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if self.tanh and i < last:
                x = torch.tanh(x)
        return x


def _train(model: nn.Module, steps: int, seed: int, lr: float) -> list[float]:
    x_all, y_all = teacher_classification(512, 32, 10, data_generator(seed))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        opt.zero_grad()
        logits = model(x_all[rows])
        loss = F.cross_entropy(logits, y_all[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run_deep_exploding(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = DeepMLP(gain=3.0, tanh=False)        # 12 linear layers, gain 3 each, no activation
    return _train(model, steps, seed, lr=1e-9)   # tiny lr keeps it finite


def run_deep_vanishing(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = DeepMLP(gain=0.3, tanh=True)         # 12 tanh layers, gain 0.3 each
    return _train(model, steps, seed, lr=0.1)


EXAMPLES = [
    Example(
        name="deep-exploding",
        title="12 linear layers initialised with gain 3: the gradient grows ~3x per layer toward the input",
        run=run_deep_exploding,
        expect=(Expect("LK104", None, None),),
        healthy=False,
        file=FILE,
    ),
    Example(
        name="deep-vanishing",
        title="12 tanh layers initialised with gain 0.3: the gradient shrinks ~0.3x per layer toward the input",
        run=run_deep_vanishing,
        expect=(Expect("LK103", None, None),),
        healthy=False,
        file=FILE,
    ),
]
