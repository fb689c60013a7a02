"""Broken examples after Karpathy's "Yes you should understand backprop" (2016).

Saturated sigmoids, ReLUs killed by a large learning rate, an exploding vanilla RNN and
the clamped DQN loss. Each is a small, deterministic model on synthetic data; the
comment ``# LK1xx-...`` marks the line where leaky must point.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from leaky.zoo._base import Example, Expect, batches, data_generator, teacher_classification

FILE = __file__


# ---------------------------------------------------------------------------------------
# sigmoid-big-init: the first sigmoid layer sits in its flat tails
#
# fc1 ~ N(0, 5^2) on raw features (offsets up to +-30) puts ~99% of act1's pre-activations
# beyond |z| = 6. Two causes multiply: z has scale sqrt(20)·std(W)·rms(x) = sqrt(20)·4.98·15.3;
# the weights alone (standardised inputs) leave 78% flat, the inputs alone (Xavier fc1) 56%.
# Only fc1 is over-initialised on purpose: if every layer were N(0, 5^2) the large weights
# would amplify the backward signal about as much as the flat sigmoids shrink it. With three
# sigmoid layers the gradient entering fc1 is ~1e-4 of the one entering fc4. It trains with
# the optimizer of its fix (sigmoid-xavier: Adam, lr 3e-3), so the two differ only in the
# initialisation and the input scaling.
# ---------------------------------------------------------------------------------------

class SigmoidMLP(nn.Module):
    """20 -> 64 -> 64 -> 64 -> 10 with sigmoid activations as named submodules."""

    def __init__(self, d_in: int = 20, width: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.Sigmoid()
        self.fc2 = nn.Linear(width, width)
        self.act2 = nn.Sigmoid()
        self.fc3 = nn.Linear(width, width)
        self.act3 = nn.Sigmoid()
        self.fc4 = nn.Linear(width, classes)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)  # LK101-act1
        x = self.fc2(x)
        x = self.act2(x)
        x = self.fc3(x)
        x = self.act3(x)
        x = self.fc4(x)
        return x


def raw_features(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-labelled data, returned in "raw units": per-feature offsets and scales.

    ``(x - mean) / std`` recovers standardised inputs; the broken example skips that.
    """
    x, y = teacher_classification(n, 20, 10, gen)
    offset = (torch.rand(20, generator=gen) * 2 - 1) * 30.0
    scale = 1.0 + torch.rand(20, generator=gen) * 9.0
    return x * scale + offset, y


def run_sigmoid_big_init(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = SigmoidMLP()
    nn.init.normal_(model.fc1.weight, mean=0.0, std=5.0)   # "bigger init, faster learning"
    gen = data_generator(seed)
    x_all, y_all = raw_features(512, gen)                   # not standardised
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
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
# relu-high-lr: one huge SGD step pushes most first-layer units below zero for good.
# With un-centred inputs the step moves w.x + b the same way for every sample, so a unit
# pushed down is below zero on the whole dataset and never receives a gradient again.
# ---------------------------------------------------------------------------------------

class ReluMLP(nn.Module):
    """20 -> 128 -> 128 -> 10 with ReLU activations as named submodules."""

    def __init__(self, d_in: int = 20, width: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, width)
        self.act2 = nn.ReLU()
        self.fc3 = nn.Linear(width, classes)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)  # LK102-act1
        x = self.fc2(x)
        x = self.act2(x)
        x = self.fc3(x)
        return x


RELU_HIGH_LR = 10.0


def run_relu_high_lr(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = ReluMLP()
    gen = data_generator(seed)
    x_all, y_all = teacher_classification(512, 20, 10, gen)
    x_all = x_all + 1.0                                        # un-centred features (mean 1)
    opt = torch.optim.SGD(model.parameters(), lr=RELU_HIGH_LR)   # far too large
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
# rnn-exploding: vanilla tanh RNN whose recurrent matrix amplifies by 2.0 per step
#
# Small input weights and zero biases keep tanh near its linear region for the first
# steps, so backprop through time multiplies by ~2 per step there: the gradient reaching
# h_0 is ~1e3x the one at h_39 (the loss reads the last step only). A small SGD lr keeps
# the weights, and the growth, about fixed over 20 steps.
# ---------------------------------------------------------------------------------------

class RNNClassifier(nn.Module):
    """nn.RNN (tanh) over the sequence, a linear head on the LAST hidden state."""

    def __init__(self, d_in: int = 8, hidden: int = 32, classes: int = 4) -> None:
        super().__init__()
        self.rnn = nn.RNN(d_in, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.rnn(x)  # LK105-rnn
        last = out[:, -1]
        return self.head(last)


def sequence_task(n: int, seq: int, d_in: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of noise; the label is the quadrant of the sum of two early features."""
    x = torch.randn(n, seq, d_in, generator=gen)
    s = x[:, :5, :2].sum(dim=1)
    y = (s[:, 0] > 0).long() * 2 + (s[:, 1] > 0).long()
    return x, y


RNN_RADIUS = 2.0
RNN_INPUT_SCALE = 0.1
RNN_LR = 1e-4


def run_rnn_exploding(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = RNNClassifier()
    with torch.no_grad():
        nn.init.orthogonal_(model.rnn.weight_hh_l0)
        model.rnn.weight_hh_l0.mul_(RNN_RADIUS)        # spectral radius 2.0
        model.rnn.weight_ih_l0.mul_(RNN_INPUT_SCALE)   # small drive: tanh mostly linear
        model.rnn.bias_ih_l0.zero_()
        model.rnn.bias_hh_l0.zero_()
    gen = data_generator(seed)
    x_all, y_all = sequence_task(256, 40, 8, gen)
    opt = torch.optim.SGD(model.parameters(), lr=RNN_LR)
    losses = []
    for step in range(steps):
        rows = batches(256, 16, step)
        opt.zero_grad()
        logits = model(x_all[rows])
        loss = F.cross_entropy(logits, y_all[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------
# dqn-clamped-td: "clip the TD error to [-1, 1]" written as a clamp on the loss input
# ---------------------------------------------------------------------------------------

class QNet(nn.Module):
    """8 -> 64 -> 64 -> 4 action values, Kaiming init."""

    def __init__(self, d_state: int = 8, width: int = 64, actions: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_state, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, width)
        self.act2 = nn.ReLU()
        self.fc3 = nn.Linear(width, actions)
        for layer in (self.fc1, self.fc2, self.fc3):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            nn.init.zeros_(layer.bias)

    def forward(self, s):
        h = self.fc1(s)
        h = self.act1(h)
        h = self.fc2(h)
        h = self.act2(h)
        return self.fc3(h)


def transitions(n: int, gen: torch.Generator, reward_scale: float = 10.0, noise: float = 1.0):
    """A replay buffer of synthetic transitions (s, a, r, s', done).

    The reward is a learnable function of (s, a) of scale 10 plus unit noise, so most TD
    errors start far outside [-1, 1].
    """
    s = torch.randn(n, 8, generator=gen)
    a = torch.randint(0, 4, (n,), generator=gen)
    r = reward_scale * torch.tanh(s.gather(1, a[:, None]).squeeze(1)) + noise * torch.randn(n, generator=gen)
    s2 = torch.randn(n, 8, generator=gen)
    done = (torch.rand(n, generator=gen) < 0.1).float()
    return s, a, r, s2, done


GAMMA = 0.99


def run_dqn_clamped_td(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    qnet = QNet()
    target_net = copy.deepcopy(qnet)
    gen = data_generator(seed)
    s_all, a_all, r_all, s2_all, done_all = transitions(1024, gen)
    opt = torch.optim.Adam(qnet.parameters(), lr=5e-3)
    losses = []
    for step in range(steps):
        rows = batches(1024, 64, step)
        s, a, r, s2, done = s_all[rows], a_all[rows], r_all[rows], s2_all[rows], done_all[rows]
        opt.zero_grad()
        q = qnet(s).gather(1, a[:, None]).squeeze(1)
        with torch.no_grad():
            next_q = target_net(s2).max(dim=1).values
            target = r + GAMMA * (1.0 - done) * next_q
        td = q - target
        td = torch.clamp(td, -1.0, 1.0)  # LK106-clamp
        loss = td.pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------
# dqn-clamped-td-small-rewards: the same clamp, with rewards of scale 1 (CleanRL-like)
#
# With rewards of scale 1 and PyTorch's default init only ~20% of the TD errors start
# outside [-1, 1], and fewer as Q fits (~10% over 200 steps, ~6% at the end): below the 25%
# a hidden dead zone needs. But the clamp sits between the Q-network's output and the loss,
# so each zeroed element is one transition that teaches the network nothing.
# ---------------------------------------------------------------------------------------

def run_dqn_clamped_td_small_rewards(steps: int = 20, seed: int = 0, huber: bool = False) -> list[float]:
    torch.manual_seed(seed)
    qnet = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    target_net = copy.deepcopy(qnet)
    gen = data_generator(seed)
    s_all, a_all, r_all, s2_all, done_all = transitions(1024, gen, reward_scale=1.0, noise=0.5)
    opt = torch.optim.Adam(qnet.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        rows = batches(1024, 64, step)
        s, a, r, s2, done = s_all[rows], a_all[rows], r_all[rows], s2_all[rows], done_all[rows]
        q = qnet(s).gather(1, a[:, None]).squeeze(1)
        with torch.no_grad():
            target = r + 0.9 * (1.0 - done) * target_net(s2).max(dim=1).values
        if huber:
            loss = F.smooth_l1_loss(q, target)   # the fix: gradient clipped to ±1, never zeroed
        else:
            loss = (q - target).clamp(-1.0, 1.0).pow(2).mean()  # LK106-td-clamp
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


EXAMPLES = [
    Example(
        name="sigmoid-big-init",
        title="Sigmoid MLP, first layer N(0, 5^2) on raw unscaled inputs: act1 saturates, gradient vanishes",
        run=run_sigmoid_big_init,
        expect=(Expect("LK101", "act1", "LK101-act1"), Expect("LK103", None, None)),
        healthy=False,
        fixed_by="sigmoid-xavier",
        file=FILE,
    ),
    Example(
        name="relu-high-lr",
        title="ReLU MLP, un-centred inputs, SGD lr=10: the first steps kill most units of act1 for good",
        run=run_relu_high_lr,
        expect=(Expect("LK102", "act1", "LK102-act1"),),
        healthy=False,
        fixed_by="relu-mlp",
        file=FILE,
    ),
    Example(
        name="rnn-exploding",
        title="Vanilla tanh RNN, recurrent matrix orthogonal x 2.0, loss on the last step: BPTT explodes",
        run=run_rnn_exploding,
        expect=(Expect("LK105", "rnn", "LK105-rnn"),),
        healthy=False,
        fixed_by="rnn-clipped-orthogonal",
        file=FILE,
    ),
    Example(
        name="dqn-clamped-td",
        title="DQN whose TD error is clamped to [-1, 1] before squaring: large errors get zero gradient",
        run=run_dqn_clamped_td,
        expect=(Expect("LK106", None, "LK106-clamp"),),
        healthy=False,
        fixed_by="dqn-huber",
        file=FILE,
    ),
    Example(
        name="dqn-clamped-td-small-rewards",
        title="DQN with rewards of scale 1 and the TD error clamped to [-1, 1]: 10-20% of transitions get zero "
              "gradient, on the loss path",
        run=run_dqn_clamped_td_small_rewards,
        expect=(Expect("LK106", None, "LK106-td-clamp"),),
        healthy=False,
        fixed_by="dqn-small-rewards-huber",
        file=FILE,
    ),
]
