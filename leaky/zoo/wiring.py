"""Networks wired wrong from step zero: what reaches the loss, how layers start, what
data goes in. The comment ``# LK30x-...`` marks the line where leaky must point.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leaky.zoo._base import Example, Expect, batches, data_generator, fit, teacher_classification

FILE = __file__


class Classifier(nn.Module):
    """20 -> 64 -> 10 ReLU classifier; `head_act` decides what the loss receives."""

    def __init__(self, head_act: nn.Module | None = None, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(64, classes)
        self.head_act = head_act

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)
        x = self.fc2(x)
        if self.head_act is not None:
            x = self.head_act(x)  # LK301-head
        return x


def _classify(model: nn.Module, loss_fn, steps: int, seed: int, classes: int = 10) -> list[float]:
    gen = data_generator(seed)
    x_all, y_all = teacher_classification(512, 20, classes, gen)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        opt.zero_grad()
        loss = loss_fn(model(x_all[rows]), y_all[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run_ce_after_softmax(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _classify(Classifier(nn.Softmax(dim=-1)), F.cross_entropy, steps, seed)


def run_nll_on_probabilities(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _classify(Classifier(nn.Softmax(dim=-1)), F.nll_loss, steps, seed)


def run_relu_logits(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _classify(Classifier(nn.ReLU()), nn.CrossEntropyLoss(), steps, seed)


def run_log_softmax_over_batch(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _classify(Classifier(nn.LogSoftmax(dim=0)), F.nll_loss, steps, seed)


def run_bce_on_raw_outputs(steps: int = 20, seed: int = 0) -> list[float]:
    """BCELoss on a linear output: torch raises on the first batch; leaky explains why."""
    torch.manual_seed(seed)
    model = Classifier(classes=1)
    gen = data_generator(seed)
    x_all, y_all = teacher_classification(512, 20, 2, gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        opt.zero_grad()
        out = model(x_all[rows]).squeeze(-1)
        loss = nn.BCELoss()(out, y_all[rows].float())  # LK301-bce
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run_mse_on_class_indices(steps: int = 20, seed: int = 0) -> list[float]:
    """MSE between [batch, 5] scores and [batch] class indices: torch raises on shapes."""
    torch.manual_seed(seed)
    model = Classifier(classes=5)
    gen = data_generator(seed)
    x_all, y_all = teacher_classification(512, 20, 5, gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        opt.zero_grad()
        pred = model(x_all[rows])
        loss = F.mse_loss(pred, y_all[rows].float())  # LK301-mse
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class ConstantMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.act1 = nn.Tanh()
        self.fc2 = nn.Linear(64, 10)
        nn.init.constant_(self.fc1.weight, 0.05)   # LK302-const
        nn.init.zeros_(self.fc1.bias)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)
        return self.fc2(x)


def run_constant_init(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _classify(ConstantMLP(), F.cross_entropy, steps, seed)


class DeepReLU(nn.Module):
    """8 ReLU layers whose weights are N(0, 1): sqrt(fan_in) = 8x too large per layer."""

    def __init__(self, depth: int = 8, width: int = 64, std: float | None = 1.0, norm: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(20 if i == 0 else width, width) for i in range(depth))
        self.norms = nn.ModuleList(nn.BatchNorm1d(width) for _ in range(depth)) if norm else None
        self.head = nn.Linear(width, 10)
        for layer in self.layers:
            if std is None:
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            else:
                nn.init.normal_(layer.weight, std=std)  # LK302-deep
            nn.init.zeros_(layer.bias)

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if self.norms is not None:
                x = self.norms[i](x)
            x = torch.relu(x)
        return self.head(x)


def run_deep_relu_big_init(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    gen = data_generator(seed)
    x_all, y_all = teacher_classification(512, 20, 10, gen)
    model = DeepReLU()
    opt = torch.optim.SGD(model.parameters(), lr=1e-12)   # tiny: it must not blow up while observed
    losses = []
    for step in range(steps):
        rows = batches(512, 64, step)
        opt.zero_grad()
        loss = F.cross_entropy(model(x_all[rows]), y_all[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run_deep_kaiming_batchnorm(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _classify(DeepReLU(std=None, norm=True), F.cross_entropy, steps, seed)


class TanhNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 32)
        self.act1 = nn.Tanh()
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        x = self.fc1(x)  # LK303-input
        x = self.act1(x)
        return self.fc2(x)


def _sensor_data(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Six 'sensor' readings in raw units: offsets in the hundreds, spreads up to 40."""
    x, y = teacher_classification(n, 6, 3, gen)
    offset = torch.tensor([120.0, -80.0, 300.0, 15.0, 0.0, 45.0])
    scale = torch.tensor([40.0, 25.0, 10.0, 5.0, 1.0, 30.0])
    return x * scale + offset, y


def _run_tanh(steps: int, seed: int, standardise: bool) -> list[float]:
    torch.manual_seed(seed)
    gen = data_generator(seed)
    x_all, y_all = _sensor_data(512, gen)
    if standardise:
        x_all = (x_all - x_all.mean(0)) / x_all.std(0)
    model = TanhNet()
    return fit(model, torch.optim.Adam(model.parameters(), lr=1e-3), x_all, y_all, F.cross_entropy, steps)


def run_unnormalized_input(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_tanh(steps, seed, standardise=False)


def run_standardized_input(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_tanh(steps, seed, standardise=True)


class ScaledTanh(torch.autograd.Function):
    """y = tanh(x @ w): a hand-written layer with a hand-written backward."""

    @staticmethod
    def forward(ctx, x, w):
        y = torch.tanh(x @ w)
        ctx.save_for_backward(x, w, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, w, y = ctx.saved_tensors
        local = grad * (1 - y * y)                # d tanh(z)/dz = 1 - tanh^2
        return local @ w.t(), x.t() @ local


class ScaledTanhForgot(ScaledTanh):
    """The same layer, but the weight gradient forgets the tanh derivative."""

    @staticmethod
    def backward(ctx, grad):
        x, w, y = ctx.saved_tensors
        local = grad * (1 - y * y)
        return local @ w.t(), x.t() @ grad  # LK305-backward


class HandWritten(nn.Module):
    def __init__(self, function) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(20, 32) / 20 ** 0.5)
        self.function = function
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        h = self.function.apply(x, self.w)
        return self.head(h)


def run_wrong_custom_backward(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _classify(HandWritten(ScaledTanhForgot), F.cross_entropy, steps, seed)


def run_correct_custom_backward(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    return _classify(HandWritten(ScaledTanh), F.cross_entropy, steps, seed)


class SmallRegressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.act1 = nn.Tanh()
        self.fc2 = nn.Linear(64, 64)
        self.act2 = nn.Tanh()
        self.fc3 = nn.Linear(64, 1)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act1(x)
        x = self.fc2(x)
        x = self.act2(x)
        return self.fc3(x)


def _run_precision(steps: int, seed: int, mode: str) -> list[float]:
    """Targets of size ~1e-3 (a residual, say): per-element gradients of ~1e-6 and below."""
    torch.manual_seed(seed)
    gen = data_generator(seed)
    x_all = torch.randn(512, 16, generator=gen)
    y_all = torch.tanh(x_all[:, :1]) * 1e-3
    model = SmallRegressor()
    if mode == "half":
        model = model.half()  # LK304-fc1
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", enabled=mode == "fp16-scaled")
    autocast = {"fp16-scaled": torch.float16, "bf16": torch.bfloat16}.get(mode)
    losses = []
    for step in range(steps):
        rows = batches(512, 128, step)
        x, y = x_all[rows], y_all[rows]
        if mode == "half":
            x, y = x.half(), y.half()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss = F.mse_loss(model(x).float(), y.float())
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses


def run_fp16_no_scaler(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_precision(steps, seed, "half")


def run_amp_grad_scaler(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_precision(steps, seed, "fp16-scaled")


def run_amp_bf16(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_precision(steps, seed, "bf16")


class PressureNet(nn.Module):
    """A regressor whose output layer starts with its bias at 0."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 64), nn.ReLU())
        self.out = nn.Linear(64, 1)

    def forward(self, x):
        return self.out(self.body(x))  # LK307-out


def _run_pressure(steps: int, seed: int, bias_at_mean: bool) -> list[float]:
    """Targets of mean ~310 (a pressure in kPa) from standardised inputs."""
    torch.manual_seed(seed)
    gen = data_generator(seed)
    x_all = torch.randn(512, 8, generator=gen)
    y_all = 310.0 + 18.0 * torch.tanh(x_all[:, :2].sum(1, keepdim=True))
    model = PressureNet()
    if bias_at_mean:
        nn.init.constant_(model.out.bias, y_all.mean().item())
    return fit(model, torch.optim.Adam(model.parameters(), lr=1e-3), x_all, y_all, F.mse_loss, steps)


def run_regression_bias_at_zero(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_pressure(steps, seed, bias_at_mean=False)


def run_regression_bias_at_mean(steps: int = 20, seed: int = 0) -> list[float]:
    return _run_pressure(steps, seed, bias_at_mean=True)


def _broken(name, title, run, *expect, fixed_by=None, raises=False):
    return Example(name, title, run, tuple(expect), healthy=False, fixed_by=fixed_by, file=FILE, raises=raises)


def _healthy(name, title, run):
    return Example(name, title, run, (), healthy=True, file=FILE)


EXAMPLES = [
    _broken("ce-after-softmax", "Softmax head fed into cross_entropy, which applies softmax again",
            run_ce_after_softmax, Expect("LK301", "head_act", "LK301-head")),
    _broken("nll-on-probabilities", "nll_loss given probabilities instead of log-probabilities",
            run_nll_on_probabilities, Expect("LK301", "head_act", "LK301-head")),
    _broken("relu-logits", "A ReLU on the logits before CrossEntropyLoss", run_relu_logits,
            Expect("LK301", "head_act", "LK301-head")),
    _broken("log-softmax-over-batch", "log_softmax over dim 0, the batch, before nll_loss",
            run_log_softmax_over_batch, Expect("LK301", "head_act", "LK301-head"),
            Expect("LK306", "head_act", "LK301-head")),
    _broken("bce-on-raw-outputs", "BCELoss on a linear output outside [0, 1] (torch raises)",
            run_bce_on_raw_outputs, Expect("LK301", None, "LK301-bce"), raises=True),
    _broken("mse-on-class-indices", "MSE between class scores and class indices 0..4 (torch raises)",
            run_mse_on_class_indices, Expect("LK301", None, "LK301-mse"), raises=True),
    _broken("constant-init", "A hidden layer initialised to a constant: all units identical",
            run_constant_init, Expect("LK302", "fc1", "LK302-const")),
    _broken("deep-relu-big-init", "8 ReLU layers with N(0, 1) weights: the signal grows 8x per layer",
            run_deep_relu_big_init, Expect("LK302", None, "LK302-deep"),
            fixed_by="deep-kaiming-batchnorm"),
    _broken("unnormalized-input", "Raw sensor readings (offsets in the hundreds) into a tanh layer",
            run_unnormalized_input, Expect("LK303", "fc1", "LK303-input"), fixed_by="standardized-input"),
    _broken("wrong-custom-backward", "A custom autograd.Function whose weight gradient skips tanh'",
            run_wrong_custom_backward, Expect("LK305", "HandWritten", "LK305-backward"),
            fixed_by="correct-custom-backward"),
    _healthy("correct-custom-backward", "The same custom Function with a correct backward",
             run_correct_custom_backward),
    _broken("fp16-no-scaler", "model.half() trained on small targets without loss scaling", run_fp16_no_scaler,
            Expect("LK304", "fc1", "LK304-fc1"), fixed_by="amp-grad-scaler"),
    _healthy("amp-grad-scaler", "float32 weights, float16 autocast and a GradScaler", run_amp_grad_scaler),
    _healthy("amp-bf16", "float32 weights and bfloat16 autocast", run_amp_bf16),
    _healthy("deep-kaiming-batchnorm", "8 ReLU layers, Kaiming init and BatchNorm", run_deep_kaiming_batchnorm),
    _healthy("standardized-input", "The same sensor data, standardised per feature", run_standardized_input),
    _broken("regression-bias-at-zero", "Targets of mean ~310 and an output bias at 0: the first loss is ~700x Var(t)",
            run_regression_bias_at_zero, Expect("LK307", "out", "LK307-out"), fixed_by="regression-bias-at-mean"),
    _healthy("regression-bias-at-mean", "The same regressor with its output bias started at the target mean",
             run_regression_bias_at_mean),
]
