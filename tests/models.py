"""Small real models for tests that need a model but not a zoo scenario."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in=8, width=16, d_out=3, dropout=0.0):
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(width, width)
        self.act2 = nn.Tanh()
        self.fc3 = nn.Linear(width, d_out)

    def forward(self, x):
        x = self.act1(self.fc1(x))
        x = self.drop(x)
        x = self.act2(self.fc2(x))
        return self.fc3(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean(dim=(2, 3)))


class GRUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 16)
        layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.1, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.encoder(self.proj(x)).mean(1))


def data_for(model: nn.Module, n: int = 16, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    if isinstance(model, CNN):
        x = torch.randn(n, 1, 8, 8, generator=gen)
    elif isinstance(model, (GRUNet, TinyTransformer)):
        x = torch.randn(n, 6, 4, generator=gen)
    else:
        x = torch.randn(n, 8, generator=gen)
    y = torch.randint(0, 3, (n,), generator=gen)
    return x, y


def train(model: nn.Module, steps: int = 5, seed: int = 1, lr: float = 0.05) -> list[float]:
    """A plain loop: what a user writes. Returns the losses."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for step in range(steps):
        x, y = data_for(model, seed=seed + step)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    return losses
