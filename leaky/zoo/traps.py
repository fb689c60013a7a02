"""Broken examples: ops that zero the gradient (LK106) or produce NaN/Inf (LK107).

A rounding step without a straight-through estimator, a softmax over a size-1 dim, the
``torch.where(x > 0, log(x), 0)`` trap, a Euclidean distance at zero, and
``log(softmax(z))`` underflowing. The comment ``# LK1xx-...`` marks the offending line.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leaky.zoo._base import Example, Expect, batches, data_generator, teacher_classification

FILE = __file__


def _train_classifier(model: nn.Module, x_all, y_all, opt, steps: int, batch: int = 64,
                      loss_fn=F.cross_entropy) -> list[float]:
    n = x_all.shape[0]
    losses = []
    for step in range(steps):
        rows = batches(n, batch, step)
        opt.zero_grad()
        out = model(x_all[rows])
        loss = loss_fn(out, y_all[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------
# round-no-ste: a quantiser on the main path, no straight-through estimator
# ---------------------------------------------------------------------------------------

class Quantize(nn.Module):
    """Rounds to a grid of 1/levels. Its derivative is 0 almost everywhere."""

    def __init__(self, levels: float = 4.0) -> None:
        super().__init__()
        self.levels = levels

    def forward(self, x):
        x = x * self.levels
        x = torch.round(x)  # LK106-round
        x = x / self.levels
        return x


class QuantMLP(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.quant = Quantize()
        self.fc2 = nn.Linear(width, classes)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)
        x = self.quant(x)
        x = self.fc2(x)
        return x


def run_round_no_ste(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = QuantMLP()
    x_all, y_all = teacher_classification(512, 20, 10, data_generator(seed))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return _train_classifier(model, x_all, y_all, opt, steps)


# ---------------------------------------------------------------------------------------
# softmax-size1: a "probability" made by a softmax over one logit (always exactly 1)
# ---------------------------------------------------------------------------------------

class SoftmaxProbNet(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, 1)
        self.head_act = nn.Softmax(dim=-1)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)
        x = self.fc2(x)
        p = self.head_act(x)  # LK106-softmax
        return p.squeeze(-1)


def run_softmax_size1(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = SoftmaxProbNet()
    x_all, y_cls = teacher_classification(512, 20, 2, data_generator(seed))
    y_all = y_cls.float()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return _train_classifier(model, x_all, y_all, opt, steps, loss_fn=F.mse_loss)


# ---------------------------------------------------------------------------------------
# nan-where-log: torch.where(x > 0, log(x), 0) on masked (padded) features
# ---------------------------------------------------------------------------------------

class SafeLog(nn.Module):
    """Looks safe: masks log(x) where x <= 0. Forward is finite, backward is NaN at x == 0."""

    def forward(self, x):
        y = torch.log(x)  # LK107-log
        y = torch.where(x > 0, y, torch.zeros_like(x))
        return y


class LogPoolNet(nn.Module):
    """Per-token positive features, zeroed at padding, log-transformed, mean-pooled."""

    def __init__(self, d_in: int = 8, width: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.Softplus()
        self.safe_log = SafeLog()
        self.fc2 = nn.Linear(width, 1)

    def forward(self, x, mask):
        h = self.fc1(x)
        h = self.act1(h)
        h = h * mask[..., None]            # padding positions become exactly 0
        h = self.safe_log(h)
        h = h.sum(dim=1)
        h = h / mask.sum(dim=1, keepdim=True)
        h = self.fc2(h)
        return h.squeeze(-1)


def padded_sequences(n: int, seq: int, d_in: int, gen: torch.Generator):
    x = torch.randn(n, seq, d_in, generator=gen)
    lengths = torch.randint(3, seq + 1, (n,), generator=gen)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).float()
    y = (x[:, :, 0] * mask).sum(dim=1) / lengths
    return x, mask, y


def run_nan_where_log(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = LogPoolNet()
    gen = data_generator(seed)
    x_all, m_all, y_all = padded_sequences(512, 10, 8, gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        opt.zero_grad()
        pred = model(x_all[rows], m_all[rows])
        loss = F.mse_loss(pred, y_all[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------
# nan-sqrt-zero: Euclidean distance of identical embeddings
# ---------------------------------------------------------------------------------------

class PairDistance(nn.Module):
    """sqrt(sum((a - b)^2)): its derivative is infinite where a == b."""

    def forward(self, a, b):
        d = a - b
        d = d.pow(2)
        d = d.sum(dim=-1)
        d = torch.sqrt(d)  # LK107-sqrt
        return d


class Siamese(nn.Module):
    def __init__(self, d_in: int = 16, width: int = 32, d_emb: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, d_emb)
        self.dist = PairDistance()

    def embed(self, x):
        h = self.fc1(x)
        h = self.act1(h)
        return self.fc2(h)

    def forward(self, a, b):
        ea = self.embed(a)
        eb = self.embed(b)
        return self.dist(ea, eb)


def pairs(n: int, d_in: int, gen: torch.Generator):
    """Half the pairs are an input with itself (label 1), half two random inputs (label 0)."""
    a = torch.randn(n, d_in, generator=gen)
    other = torch.randn(n, d_in, generator=gen)
    same = (torch.arange(n) % 2 == 0)
    b = torch.where(same[:, None], a, other)
    return a, b, same.float()


def run_nan_sqrt_zero(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = Siamese()
    gen = data_generator(seed)
    a_all, b_all, y_all = pairs(512, 16, gen)
    margin = 2.0
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        y = y_all[rows]
        opt.zero_grad()
        d = model(a_all[rows], b_all[rows])
        pull = y * d.pow(2)
        push = (1 - y) * F.relu(margin - d).pow(2)
        loss = (pull + push).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------
# log-softmax-underflow: log(softmax(z)) with sharp logits
# ---------------------------------------------------------------------------------------

class LogProb(nn.Module):
    """log(softmax(z)) in two steps: the softmax underflows to 0, the log gives -inf."""

    def forward(self, logits):
        p = torch.softmax(logits, dim=-1)
        y = torch.log(p)  # LK107-log-softmax
        return y


class SharpClassifier(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 64, classes: int = 10,
                 temperature: float = 0.005) -> None:
        super().__init__()
        self.temperature = temperature
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, classes)
        self.logprob = LogProb()

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)
        x = self.fc2(x)
        x = x / self.temperature           # "sharpen" the logits
        return self.logprob(x)


def run_log_softmax_underflow(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = SharpClassifier()
    x_all, y_all = teacher_classification(512, 20, 10, data_generator(seed))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return _train_classifier(model, x_all, y_all, opt, steps, loss_fn=F.nll_loss)


EXAMPLES = [
    Example(
        name="round-no-ste",
        title="torch.round quantiser on the main path without a straight-through estimator",
        run=run_round_no_ste,
        expect=(Expect("LK106", "quant", "LK106-round"),),
        healthy=False,
        file=FILE,
    ),
    Example(
        name="softmax-size1",
        title="Binary 'probability' from a softmax over a single logit: always 1, zero gradient",
        run=run_softmax_size1,
        expect=(Expect("LK106", "head_act", "LK106-softmax"),),
        healthy=False,
        file=FILE,
    ),
    Example(
        name="nan-where-log",
        title="torch.where(x > 0, log(x), 0) on zero-padded features: NaN gradient at x == 0",
        run=run_nan_where_log,
        expect=(Expect("LK107", "safe_log", "LK107-log"),),
        healthy=False,
        file=FILE,
    ),
    Example(
        name="nan-sqrt-zero",
        title="Siamese net with sqrt(sum((a - b)^2)) on identical pairs: NaN gradient at distance 0",
        run=run_nan_sqrt_zero,
        expect=(Expect("LK107", "dist", "LK107-sqrt"),),
        healthy=False,
        file=FILE,
    ),
    Example(
        name="log-softmax-underflow",
        title="log(softmax(z / 0.005)): probabilities underflow to 0, loss inf, gradient NaN",
        run=run_log_softmax_underflow,
        expect=(Expect("LK107", "logprob", "LK107-log-softmax"),),
        healthy=False,
        file=FILE,
    ),
]
