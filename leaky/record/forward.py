"""Forward-side taps for the wiring checks (LK301-LK303): what reaches the loss, what
enters the first layer, and how each layer's weights were initialised.

All values stay on the device in small fixed-size tensors and are read once, at the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from leaky import ops

from leaky.process import distributed
from leaky.record.reduce import other_dims, sum_over

def producer(tensor: Tensor, depth: int = 4):
    """The autograd node that made this tensor, looking through views and copies.

    NOTE: through the nodes that pass a gradient on unchanged (ops.passes_gradient). Before
    the op registry this was a list of name prefixes in which "T" (for TBackward) also
    matched TanhBackward and ThresholdBackward, so a tanh output was looked through."""
    return _past_moves(tensor.grad_fn, depth)


def _past_moves(node, depth: int = 4):
    while node is not None and depth > 0 and ops.passes_gradient(type(node).__name__):
        inputs = [fn for fn, _ in node.next_functions if fn is not None]
        node = inputs[0] if len(inputs) == 1 else None
        depth -= 1
    return node


def behind_scales(node, depth: int = 4) -> tuple[object, Tensor | float] | None:
    """(the node behind, their product) when `node` and the nodes after it only multiply by
    single numbers (logits / temperature, logit_scale.exp() * logits, ops.scaled_input),
    through views and copies; None when `node` is no such scale."""
    factor: Tensor | float = 1.0
    scaled = False
    while node is not None and depth > 0:
        found = ops.scaled_input(node)
        if found is None:
            break
        node, c, power = found
        c = c.detach().float().reshape(()) if isinstance(c, Tensor) else float(c)
        factor = factor * (c if power == 1 else 1.0 / c)
        node, scaled, depth = _past_moves(node), True, depth - 1
    return (node, factor) if scaled and node is not None else None


def _running(old: Tensor | None, new: Tensor, reduce) -> Tensor:
    return new if old is None else reduce(old, new)


@dataclass
class LossTap:
    """What reached one loss call site."""

    op: str
    expects: str
    input_node: str | None
    input_site: int | None                  # the site that produced the input, if recorded
    input_shape: tuple[int, ...]
    target_shape: tuple[int, ...] | None
    target_dtype: str | None
    detail: dict = field(default_factory=dict)
    low: Tensor | None = None               # smallest input value seen
    high: Tensor | None = None              # largest input value seen
    target_integral: Tensor | None = None   # all float targets were whole numbers
    target_low: Tensor | None = None        # smallest float target seen
    target_high: Tensor | None = None
    failed: str | None = None               # the loss call raised: its message
    start: dict = field(default_factory=dict)   # LK307, the first call: its loss and target statistics
    # LK307: the input is another site's output times single numbers (logits / temperature):
    # that site, and the factor (at the first call)
    scaled_from: tuple[int, Tensor | float] | None = None

    def update(self, x: Tensor, target: Tensor | None) -> None:
        with torch.no_grad():
            values = x.detach()
            if values.is_floating_point() and values.numel():
                self.low = _running(self.low, values.min().float(), torch.minimum)
                self.high = _running(self.high, values.max().float(), torch.maximum)
            if target is not None and target.is_floating_point() and target.numel():
                whole = (target == target.round()).all()
                self.target_integral = _running(self.target_integral, whole, torch.logical_and)
                self.target_low = _running(self.target_low, target.detach().min().float(), torch.minimum)
                self.target_high = _running(self.target_high, target.detach().max().float(), torch.maximum)

    def first_call(self, op: str, x: Tensor, target, kwargs: dict, out) -> None:
        """LK307's numbers, once: the loss per element at the first call, and what a neutral
        output would score on the same targets (ops.loss_neutral), all left on the device;
        with `scaled_from`, the site behind the scales and their factor."""
        neutral = ops.loss_neutral(op)
        if self.start or neutral is None or not isinstance(out, Tensor) or not isinstance(target, Tensor):
            return
        with torch.no_grad():
            value = out.detach().float()
            count = max(1, (target.numel() if neutral == ops.losses.CLASSES else x.numel()))
            reduction = kwargs.get("reduction", "mean")
            loss = value.mean() if reduction == "none" else value.sum() / count if reduction == "sum" else value
            start = {"neutral": neutral, "loss": loss.reshape(())}
            if neutral == ops.losses.CLASSES:
                start["classes"] = int(x.shape[1] if x.ndim >= 2 else x.shape[0])
            elif target.is_floating_point() or neutral == ops.losses.PRIOR:
                t = target.detach().double()
                mean = t.mean()
                start.update(target_mean=mean, target_var=((t - mean) ** 2).mean(),
                             target_mad=(t - mean).abs().mean(),
                             target_hard=((t == 0) | (t == 1)).all())
            if self.scaled_from is not None:
                start["scaled_site"], start["scale"] = self.scaled_from
        self.start = start

    def host(self) -> dict:
        read = lambda t: None if t is None else t.item()  # noqa: E731
        start = {k: read(v) if isinstance(v, Tensor) else v for k, v in self.start.items()}
        return {"low": read(self.low), "high": read(self.high),
                "target_integral": read(self.target_integral),
                "target_low": read(self.target_low), "target_high": read(self.target_high), "start": start}


@dataclass
class InputTap:
    """Per-feature mean and spread of raw data entering a parameterised layer."""

    feature_dim: int
    features: int
    count: int = 0
    total: Tensor | None = None
    squares: Tensor | None = None
    made_at: tuple | None = None   # where the data first seen here was made (record/provenance.py)

    def update(self, x: Tensor) -> None:
        with torch.no_grad():
            # NOTE: float64 sums: E[x^2] - mean^2 cancels badly in float32 when |mean| >> std.
            data = distributed.local(x.detach()).double()   # a DTensor input (tensor parallelism): this rank's part
            dims = other_dims(data.ndim, self.feature_dim)
            self.count += data.numel() // self.features
            self.total = _running(self.total, sum_over(data, dims), torch.add)
            self.squares = _running(self.squares, sum_over(data * data, dims), torch.add)

    def host(self) -> tuple[list[float], list[float]]:
        mean = self.total / max(self.count, 1)
        var = (self.squares / max(self.count, 1) - mean * mean).clamp_min(0)
        return mean.cpu().tolist(), var.sqrt().cpu().tolist()


@dataclass
class WeightTap:
    """A layer's weight as first seen: its scale and whether its units are all alike."""

    kind: str            # "linear" | "conv"
    shape: tuple[int, ...]
    fan_in: int
    fan_out: int
    std: Tensor
    rows_identical: Tensor

    @classmethod
    def of(cls, kind: str, weight: Tensor, bias: Tensor | None) -> "WeightTap":
        with torch.no_grad():
            w = weight.detach().float()
            fan_in, fan_out = nn.init._calculate_fan_in_and_fan_out(w) if w.ndim >= 2 else (w.numel(), 1)
            rows = w.reshape(w.shape[0], -1)
            same = (rows - rows[:1]).abs().max() == 0 if rows.shape[0] > 1 else torch.tensor(False)
            if bias is not None and bias.numel() > 1:
                b = bias.detach().float()
                same = same & ((b - b[:1]).abs().max() == 0)
            return cls(kind, tuple(weight.shape), fan_in, fan_out, w.std() if w.numel() > 1 else w.abs().mean(), same)


class ForwardTaps:
    """Keeps the taps of one audit, keyed by site."""

    def __init__(self, mark, origin_of=lambda tensor: None) -> None:
        self.mark = mark   # the recorder's key in node.metadata: node -> site
        self.origin_of = origin_of   # tensor -> where its data was made (record/provenance.py)
        self.losses: dict[int, LossTap] = {}
        self.inputs: dict[int, InputTap] = {}
        self.weights: dict[int, tuple[int, WeightTap]] = {}   # id(weight) -> (site, probe)

    def observe(self, op: str, site: int, args: tuple, kwargs: dict, averages: bool = True, out=None,
                traits: ops.Traits | None = None) -> None:
        """`averages`: also fold the input's per-feature mean and spread (a watch does it at
        most once every RATE_GAP steps); a loss's extremes are taken at every call. `traits`:
        ops.traits(op), when the caller has it."""
        if traits is None:
            traits = ops.traits(op)
        if traits.loss is not None:
            self._loss(op, site, args, kwargs, out)
        kind = traits.layer
        if kind is not None and len(args) > 1 and isinstance(args[1], nn.Parameter):
            self._layer(kind, site, args, kwargs, averages)

    def loss_failed(self, op: str, site_hint: int | None, args: tuple, kwargs: dict, exc: Exception) -> None:
        if not args or not isinstance(args[0], Tensor):
            return
        probe = self._probe_for(op, -1 if site_hint is None else site_hint, args, kwargs)
        probe.failed = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        target = args[1] if len(args) > 1 and isinstance(args[1], Tensor) else kwargs.get("target")
        probe.update(args[0], target if isinstance(target, Tensor) else None)

    def _probe_for(self, op: str, site: int, args: tuple, kwargs: dict) -> LossTap:
        probe = self.losses.get(site)
        if probe is None:
            x = args[0]
            target = args[1] if len(args) > 1 and isinstance(args[1], Tensor) else kwargs.get("target")
            detail = {k: v for k, v in kwargs.items() if isinstance(v, (int, float, str, bool))}
            node = producer(x) if isinstance(x, Tensor) else None
            probe = self.losses[site] = LossTap(
                op, ops.loss_expects(op), None if node is None else type(node).__name__,
                None if node is None else node.metadata.get(self.mark), tuple(x.shape),
                tuple(target.shape) if isinstance(target, Tensor) else None,
                str(target.dtype).replace("torch.", "") if isinstance(target, Tensor) else None, detail)
        return probe

    def _loss(self, op: str, site: int, args: tuple, kwargs: dict, out=None) -> None:
        if not args or not isinstance(args[0], Tensor):
            return
        probe = self._probe_for(op, site, args, kwargs)
        target = args[1] if len(args) > 1 and isinstance(args[1], Tensor) else kwargs.get("target")
        probe.update(args[0], target if isinstance(target, Tensor) else None)
        if not probe.start and ops.loss_neutral(op) is not None:
            probe.scaled_from = self._scaled_from(args[0])
        probe.first_call(op, args[0], target, kwargs, out)

    def _scaled_from(self, x: Tensor) -> tuple[int, Tensor | float] | None:
        """(the site behind single-number scales of the loss input, their product), if any."""
        with torch.no_grad():
            found = behind_scales(producer(x))
        if found is None:
            return None
        site = found[0].metadata.get(self.mark)
        return None if site is None else (site, found[1])

    def _layer(self, kind: str, site: int, args: tuple, kwargs: dict, averages: bool = True) -> None:
        x, weight = args[0], args[1]
        bias = args[2] if len(args) > 2 and isinstance(args[2], Tensor) else kwargs.get("bias")
        if id(weight) not in self.weights:
            self.weights[id(weight)] = (site, WeightTap.of(kind, weight, bias))
        if averages and isinstance(x, Tensor) and x.is_floating_point() and not x.requires_grad and x.ndim >= 1:
            dim = 1 if kind == "conv" and x.ndim >= 3 else x.ndim - 1
            probe = self.inputs.get(site)
            if probe is None:
                probe = self.inputs[site] = InputTap(dim, x.shape[dim], made_at=self.origin_of(x))
            if x.shape[dim] == probe.features:
                probe.update(x)
