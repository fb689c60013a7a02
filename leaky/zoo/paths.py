"""Broken examples: trainable parameters whose gradient path to the loss is cut (LK108).

``.detach()``, ``.data``, a forward under ``torch.no_grad()``, a branch whose output is
never used, and a NumPy round trip. Every parameter is in the optimizer and has
``requires_grad=True``; the cut ones keep ``.grad is None`` for the whole run.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leaky.zoo._base import Example, Expect, batches, data_generator, teacher_classification

FILE = __file__


def _train(model: nn.Module, steps: int, seed: int, lr: float = 3e-3) -> list[float]:
    x_all, y_all = teacher_classification(512, 20, 10, data_generator(seed))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
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


# ---------------------------------------------------------------------------------------
# detached-branch
# ---------------------------------------------------------------------------------------

class DetachedMLP(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, classes)

    def forward(self, x):
        h = self.fc1(x)
        h = h.detach()  # LK108-detach
        h = self.act1(h)
        return self.fc2(h)


def run_detached_branch(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _train(DetachedMLP(), steps, seed)


# ---------------------------------------------------------------------------------------
# data-cut: the output layer is applied through .data
# ---------------------------------------------------------------------------------------

class DataCutMLP(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, classes)

    def forward(self, x):
        h = self.fc1(x)
        h = self.act1(h)
        out = F.linear(h, self.fc2.weight.data, self.fc2.bias.data)  # LK108-data
        return out


def run_data_cut(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _train(DataCutMLP(), steps, seed)


# ---------------------------------------------------------------------------------------
# no-grad-encoder: the encoder runs under no_grad but is in the optimizer
# ---------------------------------------------------------------------------------------

class NoGradEncoderNet(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.encoder = nn.Linear(d_in, width)
        self.act = nn.ReLU()
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        with torch.no_grad():
            h = self.encoder(x)  # LK108-nograd
        h = self.act(h)
        return self.head(h)


def run_no_grad_encoder(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _train(NoGradEncoderNet(), steps, seed)


# ---------------------------------------------------------------------------------------
# unused-branch: an auxiliary head whose output never reaches the loss
# ---------------------------------------------------------------------------------------

class AuxHeadNet(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 64, classes: int = 10, aux_classes: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, classes)
        self.aux = nn.Linear(width, aux_classes)

    def forward(self, x):
        h = self.fc1(x)
        h = self.act1(h)
        logits = self.fc2(h)
        aux_logits = self.aux(h)
        return logits, aux_logits


def run_unused_branch(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = AuxHeadNet()
    x_all, y_all = teacher_classification(512, 20, 10, data_generator(seed))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        opt.zero_grad()
        logits, aux_logits = model(x_all[rows])
        loss = F.cross_entropy(logits, y_all[rows])      # the auxiliary loss was forgotten
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------
# numpy-roundtrip
# ---------------------------------------------------------------------------------------

class NumpyMLP(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, classes)

    def forward(self, x):
        h = self.fc1(x)
        h = torch.from_numpy(h.detach().numpy() * 2.0)  # LK108-numpy
        h = self.act1(h)
        return self.fc2(h)


def run_numpy_roundtrip(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _train(NumpyMLP(), steps, seed)


EXAMPLES = [
    Example(
        name="detached-branch",
        title="fc1's output is .detach()ed before the rest of the network: fc1 never trains",
        run=run_detached_branch,
        expect=(Expect("LK108", "fc1", "LK108-detach"),),
        healthy=False,
        file=FILE,
    ),
    Example(
        name="data-cut",
        title="Output layer applied as F.linear(h, fc2.weight.data, fc2.bias.data): fc2 never trains",
        run=run_data_cut,
        expect=(Expect("LK108", "fc2", "LK108-data"),),
        healthy=False,
        file=FILE,
    ),
    Example(
        name="no-grad-encoder",
        title="Encoder called under torch.no_grad() inside forward while it is in the optimizer",
        run=run_no_grad_encoder,
        expect=(Expect("LK108", "encoder", "LK108-nograd"),),
        healthy=False,
        file=FILE,
    ),
    Example(
        name="unused-branch",
        title="Auxiliary head computed in forward but left out of the loss",
        run=run_unused_branch,
        expect=(Expect("LK108", "aux", None),),
        healthy=False,
        file=FILE,
    ),
    Example(
        name="numpy-roundtrip",
        title="fc1's output goes through NumPy and back: fc1 never trains",
        run=run_numpy_roundtrip,
        expect=(Expect("LK108", "fc1", "LK108-numpy"),),
        healthy=False,
        file=FILE,
    ),
]
