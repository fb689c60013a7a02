"""Healthy examples: well set-up models that train and must produce no warning or error.

Several are the fixes of broken examples (same network, the cause removed); the others are
traps for false positives: BatchNorm CNNs, LSTM gates, -inf causal masks, detached target
networks, frozen backbones, clamps under no_grad, sigmoid used only for a metric.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from leaky.zoo._base import Example, batches, data_generator, teacher_classification
from leaky.zoo.karpathy import (GAMMA, QNet, ReluMLP, SigmoidMLP, raw_features, run_dqn_clamped_td_small_rewards,
                                transitions)

FILE = __file__


# ---------------------------------------------------------------------------------------
# relu-mlp: the fix of relu-high-lr
# ---------------------------------------------------------------------------------------

def run_relu_mlp(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = ReluMLP()
    for layer in (model.fc1, model.fc2, model.fc3):
        nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
        nn.init.zeros_(layer.bias)
    gen = data_generator(seed)
    x_all, y_all = teacher_classification(512, 20, 10, gen)   # standardised
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
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
# sigmoid-xavier: the fix of sigmoid-big-init (standardised inputs, Xavier init)
# ---------------------------------------------------------------------------------------

def run_sigmoid_xavier(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = SigmoidMLP()
    for layer in (model.fc1, model.fc2, model.fc3, model.fc4):
        nn.init.xavier_uniform_(layer.weight)
        nn.init.zeros_(layer.bias)
    gen = data_generator(seed)
    x_raw, y_all = raw_features(512, gen)
    x_all = (x_raw - x_raw.mean(dim=0)) / x_raw.std(dim=0)    # standardise the features
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
# cnn-batchnorm: conv-bn-relu x2, pool, linear on synthetic 16x16 textures
# ---------------------------------------------------------------------------------------

class SmallCNN(nn.Module):
    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.act1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.act2 = nn.ReLU()
        self.pool2 = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.act1(x)
        x = self.pool1(x)
        x = self.conv2(x)
        x = self.bn2(x)
        x = self.act2(x)
        x = self.pool2(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


def textures(n: int, gen: torch.Generator, size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Four classes of 1 x 16 x 16 images: horizontal, vertical, diagonal stripes, checkers."""
    y = torch.randint(0, 4, (n,), generator=gen)
    coords = torch.arange(size, dtype=torch.float32)
    rows = coords[:, None].expand(size, size)
    cols = coords[None, :].expand(size, size)
    phase = torch.rand(n, 1, 1, generator=gen) * 2 * math.pi
    period = 2 * math.pi / 4.0
    patterns = torch.stack([
        torch.sin(rows * period + phase),
        torch.sin(cols * period + phase),
        torch.sin((rows + cols) * period / 2 + phase),
        torch.sin(rows * period + phase) * torch.sin(cols * period + phase),
    ], dim=1)                                                   # [n, 4, size, size]
    x = patterns[torch.arange(n), y]
    x = x + 0.5 * torch.randn(n, size, size, generator=gen)
    return x[:, None], y


def run_cnn_batchnorm(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = SmallCNN()
    gen = data_generator(seed)
    x_all, y_all = textures(512, gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        rows = batches(512, 32, step)
        opt.zero_grad()
        logits = model(x_all[rows])
        loss = F.cross_entropy(logits, y_all[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------
# dqn-huber: the fix of dqn-clamped-td
# ---------------------------------------------------------------------------------------

def run_dqn_huber(steps: int = 20, seed: int = 0) -> list[float]:
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
        loss = F.smooth_l1_loss(q, target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------
# frozen-backbone: requires_grad_(False) backbone, optimizer on the head only
# ---------------------------------------------------------------------------------------

class Backbone(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, width)
        self.act2 = nn.ReLU()

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)
        x = self.fc2(x)
        x = self.act2(x)
        return x


class FrozenBackboneNet(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.backbone = Backbone(d_in, width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        h = self.backbone(x)
        return self.head(h)


def run_frozen_backbone(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = FrozenBackboneNet()
    model.backbone.requires_grad_(False)                        # pretrained features, frozen
    gen = data_generator(seed)
    x_all, y_all = teacher_classification(512, 20, 10, gen)
    opt = torch.optim.Adam(model.head.parameters(), lr=1e-2)
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
# clamp-no-grad: clamps on targets, a metric and the weights, all under no_grad
# ---------------------------------------------------------------------------------------

class Regressor(nn.Module):
    def __init__(self, d_in: int = 16, width: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, width)
        self.act2 = nn.ReLU()
        self.fc3 = nn.Linear(width, 1)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)
        x = self.fc2(x)
        x = self.act2(x)
        x = self.fc3(x)
        return x.squeeze(-1)


def run_clamp_no_grad(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = Regressor()
    gen = data_generator(seed)
    x_all = torch.randn(512, 16, generator=gen)
    w_true = torch.randn(16, generator=gen) / 2.0
    noise = torch.randn(512, generator=gen) * 0.1
    outliers = (torch.rand(512, generator=gen) < 0.05).float() * 20.0
    y_all = torch.tanh(x_all @ w_true) * 2.0 + noise + outliers   # a few huge outliers
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        with torch.no_grad():
            target = torch.clamp(y_all[rows], -3.0, 3.0)            # clip outlier targets
        opt.zero_grad()
        pred = model(x_all[rows])
        loss = F.mse_loss(pred, target)
        loss.backward()
        opt.step()
        with torch.no_grad():
            clipped_error = torch.clamp((pred - target).abs(), max=1.0).mean()   # a metric
            for p in model.parameters():
                p.clamp_(-2.0, 2.0)                                  # weight constraint
        losses.append(loss.item())
        del clipped_error
    return losses


# ---------------------------------------------------------------------------------------
# bce-with-logits: sigmoid only for the accuracy metric, under no_grad
# ---------------------------------------------------------------------------------------

class BinaryClassifier(nn.Module):
    def __init__(self, d_in: int = 20, width: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(width, 1)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)
        x = self.fc2(x)
        return x.squeeze(-1)


def run_bce_with_logits(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = BinaryClassifier()
    gen = data_generator(seed)
    x_all, y_cls = teacher_classification(512, 20, 2, gen)
    y_all = y_cls.float()
    criterion = nn.BCEWithLogitsLoss()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        opt.zero_grad()
        logits = model(x_all[rows])
        loss = criterion(logits, y_all[rows])
        loss.backward()
        opt.step()
        with torch.no_grad():
            prob = torch.sigmoid(logits)
            accuracy = ((prob > 0.5).float() == y_all[rows]).float().mean()
        losses.append(loss.item())
        del accuracy
    return losses


# ---------------------------------------------------------------------------------------
# Clamps that look like LK106 and are not: one in a hidden layer that bounds a few
# pre-activations (the next layer still mixes every unit), and one that keeps a prediction
# in its valid range and rarely binds (targets inside the range).
# ---------------------------------------------------------------------------------------

def run_dqn_small_rewards_huber(steps: int = 20, seed: int = 0) -> list[float]:
    return run_dqn_clamped_td_small_rewards(steps, seed, huber=True)


class BoundedHidden(nn.Module):
    """16 -> 64 -> clamp(-1, 1) -> tanh -> 1: the clamp bounds the larger pre-activations (~10%)."""

    def __init__(self, d_in: int = 16, width: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.fc2 = nn.Linear(width, 1)

    def forward(self, x):
        h = self.fc1(x).clamp(-1.0, 1.0)
        return self.fc2(torch.tanh(h)).squeeze(-1)


class ShareRegressor(nn.Module):
    """A share in [0, 1]: 16 -> 64 -> ReLU -> 1, clamped to its valid range."""

    def __init__(self, d_in: int = 16, width: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, width)
        self.fc2 = nn.Linear(width, 1)
        nn.init.zeros_(self.fc2.weight)
        nn.init.constant_(self.fc2.bias, 0.5)   # start in the middle of the range

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x))).squeeze(-1).clamp(0.0, 1.0)


def _regress(model: nn.Module, y_of, steps: int, seed: int) -> list[float]:
    gen = data_generator(seed)
    x_all = torch.randn(1024, 16, generator=gen)
    y_all = y_of(x_all, gen)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        rows = batches(1024, 64, step)
        loss = F.mse_loss(model(x_all[rows]), y_all[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run_hidden_clamp(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    w = torch.randn(16, generator=data_generator(seed + 100)) / 4.0
    return _regress(BoundedHidden(), lambda x, gen: torch.tanh(x @ w) + 0.1 * torch.randn(len(x), generator=gen),
                    steps, seed)


def run_clamped_output_range(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    w = torch.randn(16, generator=data_generator(seed + 100)) / 4.0
    return _regress(ShareRegressor(), lambda x, gen: 0.05 + 0.9 * torch.sigmoid(x @ w), steps, seed)


def _healthy(name: str, title: str, run) -> Example:
    return Example(name=name, title=title, run=run, expect=(), healthy=True, file=FILE)


EXAMPLES = [
    _healthy("relu-mlp", "ReLU MLP, Kaiming init, standardised inputs, Adam lr=1e-3", run_relu_mlp),
    _healthy("sigmoid-xavier", "Sigmoid MLP with Xavier init on standardised inputs (fix of sigmoid-big-init)",
             run_sigmoid_xavier),
    _healthy("cnn-batchnorm", "Small CNN, conv-bn-relu x2, pooling, SGD with momentum", run_cnn_batchnorm),
    _healthy("dqn-huber", "DQN with smooth_l1_loss and a target network under no_grad (fix of dqn-clamped-td)",
             run_dqn_huber),
    _healthy("frozen-backbone", "Frozen MLP backbone (requires_grad_(False)); optimizer on the head only",
             run_frozen_backbone),
    _healthy("clamp-no-grad", "Regression whose clamps (targets, metric, weights) all run under no_grad",
             run_clamp_no_grad),
    _healthy("dqn-small-rewards-huber", "DQN with rewards of scale 1 and smooth_l1_loss (fix of "
             "dqn-clamped-td-small-rewards)", run_dqn_small_rewards_huber),
    _healthy("hidden-clamp", "Regression whose hidden layer clamps its larger pre-activations to [-1, 1]",
             run_hidden_clamp),
    _healthy("clamped-output-range", "A share regressed in [0, 1] whose prediction is clamped to the range "
             "(rarely binding)", run_clamped_output_range),
    _healthy("bce-with-logits", "Binary classifier with BCEWithLogitsLoss; sigmoid only for accuracy",
             run_bce_with_logits),
]
