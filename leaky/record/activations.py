"""Per-unit statistics of nonlinearities, kept on the device.

A registry maps the torch function the user called to an `Activation`: how to tell a
unit-sample is active, and how to tell it sits in a flat region of the nonlinearity.
Each site keeps a few tensors whose size is the number of units; nothing grows with batch
size or with steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

HIST_BINS = 32
HIST_LOW = -16.0  # log10 of the smallest local derivative share kept apart


@dataclass(frozen=True)
class Activation:
    family: str                                   # "relu" | "sigmoid" | "tanh" | "hardtanh" | "softmax"
    # Local derivative as a share of its maximum, computed from the OUTPUT.
    derivative_share: Callable[[Tensor], Tensor] | None = None
    can_die: bool = False                         # ReLU-family: a unit can be silent for good


def _sigmoid_share(s: Tensor) -> Tensor:
    # d/dz sigmoid = s(1-s) <= 1/4, reached at z = 0.
    return s * (1 - s) * 4


def _tanh_share(t: Tensor) -> Tensor:
    # d/dz tanh = 1 - tanh^2 <= 1, reached at z = 0.
    return 1 - t * t


RELU = Activation("relu", can_die=True)
SIGMOID = Activation("sigmoid", _sigmoid_share)
TANH = Activation("tanh", _tanh_share)
HARDTANH = Activation("hardtanh")
SOFTMAX = Activation("softmax")

# torch function name -> activation. Functional, method and in-place spellings all land here.
ACTIVATIONS: dict[str, Activation] = {
    "relu": RELU, "relu_": RELU, "threshold": RELU, "threshold_": RELU,
    "sigmoid": SIGMOID, "sigmoid_": SIGMOID,
    "tanh": TANH, "tanh_": TANH,
    "hardtanh": HARDTANH, "hardtanh_": HARDTANH, "relu6": HARDTANH,
    "softmax": SOFTMAX,
}


def hardtanh_bounds(op: str, args: tuple, kwargs: dict) -> tuple[float, float]:
    """(min_val, max_val) of a hardtanh/relu6 call, as the user wrote it."""
    if op == "relu6":
        return 0.0, 6.0
    low = kwargs.get("min_val", args[1] if len(args) > 1 else -1.0)
    high = kwargs.get("max_val", args[2] if len(args) > 2 else 1.0)
    return float(low), float(high)


def unit_dim(out: Tensor, producer: str | None) -> int:
    """Which dim indexes units: channels for conv feature maps, features otherwise."""
    if out.ndim >= 4:
        return 1
    if out.ndim == 3 and producer and producer.startswith(("Convolution", "NativeBatchNorm", "CudnnBatchNorm")):
        return 1
    return out.ndim - 1


@dataclass
class UnitStats:
    """Accumulators for one activation site. Tensors live on the activation's device."""

    activation: Activation
    units: int
    unit_dim: int
    detail: dict = field(default_factory=dict)
    samples: int = 0                      # unit-samples per unit seen so far (host int)
    active: Tensor | None = None          # [units] samples with output > 0 (relu family)
    last_active: Tensor | None = None     # [units] last step with any output > 0, -1: never
    flat: Tensor | None = None            # [units] samples in a flat region
    hist: Tensor | None = None            # [HIST_BINS] log10 local-derivative share histogram
    rows: int = 0                         # softmax rows seen
    peaked_rows: Tensor | None = None     # softmax rows whose max probability > 0.99

    def update(self, out: Tensor, step: int) -> None:
        x = out.detach()
        if self.activation.family == "softmax":
            self._update_softmax(x)
            return
        dims = [d for d in range(x.ndim) if d != self.unit_dim]
        per_unit = x.numel() // max(self.units, 1)
        self.samples += per_unit
        # NOTE: a per-step count fits in int32 (half the time of an int64 reduction on a
        # conv feature map); the running sums stay int64.
        count = torch.int32 if per_unit < 2 ** 31 else torch.int64
        if self.activation.can_die or self.detail.get("low") == 0.0:
            fired = (x > 0).sum(dims, dtype=count).long()
            self.active = fired if self.active is None else self.active + fired
            now = torch.full_like(fired, step)
            base = torch.full_like(fired, -1) if self.last_active is None else self.last_active
            self.last_active = torch.where(fired > 0, now, base)
        flat = self._flat_mask(x)
        if flat is not None:
            counted = flat.sum(dims, dtype=count).long()
            self.flat = counted if self.flat is None else self.flat + counted

    def _flat_mask(self, x: Tensor) -> Tensor | None:
        family = self.activation.family
        if family == "hardtanh":
            low, high = self.detail["low"], self.detail["high"]
            if low == 0.0:  # relu6: the lower bound is ReLU sparsity, counted as inactivity
                return x >= high
            return (x <= low) | (x >= high)
        share_of = self.activation.derivative_share
        if share_of is None:
            return None
        share = share_of(x.float())
        logs = torch.log10(share.clamp_min(10.0 ** HIST_LOW))
        hist = torch.histc(logs, bins=HIST_BINS, min=HIST_LOW, max=0.0)
        self.hist = hist if self.hist is None else self.hist + hist
        return share < self.detail["flat_share"]

    def _update_softmax(self, x: Tensor) -> None:
        dim = self.detail.get("dim", -1)
        peak = (x.amax(dim=dim) > 0.99).sum()
        self.rows += x.numel() // max(x.shape[dim], 1)
        self.peaked_rows = peak if self.peaked_rows is None else self.peaked_rows + peak

    def host(self) -> dict:
        """Copy the accumulators to the host: called once, at the end."""
        to = lambda t: None if t is None else t.detach().cpu().double().numpy()  # noqa: E731
        return {
            "active": to(self.active), "last_active": to(self.last_active), "flat": to(self.flat),
            "hist": to(self.hist), "peaked_rows": None if self.peaked_rows is None else float(self.peaked_rows),
        }


def median_from_hist(hist) -> float | None:
    """Median local-derivative share from the log10 histogram (bin centre)."""
    if hist is None or hist.sum() <= 0:
        return None
    cumulative = hist.cumsum() / hist.sum()
    index = int((cumulative >= 0.5).argmax())
    width = -HIST_LOW / HIST_BINS
    return 10.0 ** (HIST_LOW + (index + 0.5) * width)


__all__ = ["ACTIVATIONS", "UnitStats", "median_from_hist", "hardtanh_bounds", "unit_dim"]
