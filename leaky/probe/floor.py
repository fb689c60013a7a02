"""LK308's floor: the least the loss of the repeated batch can be, from the loss calls it is made of.

The loss backward() is called on is often not one loss call but a sum of several, weighted:
mixup's `lam * CE(out, y_a) + (1 - lam) * CE(out, y_b)`, a loss halved, a GradScaler's
scale. `LossTerms` records, for each call of a known loss (`ops.losses.FLOORS`) outside the
model, its value and, from a hook on its output, the gradient the step's first backward
sends it: its coefficient c_k = dL/dv_k. When L = Σ c_k v_k (checked against the loss the
step kept), the loss is that weighted sum, and its floor is `ops.losses.mixed_floor` of the
terms on each model output (C·H(t̄) for cross-entropy against the weighted mean target), summed
over outputs. The hook only reads the gradient; nothing else runs.

The weights can change from step to step while the batch is replayed (mixup draws a new lam
each step). The floor of the mean loss over steps a..b is that of the mean weights, since for a
fixed output the mean of Σ c_k,t·loss_k is Σ mean(c_k)·loss_k: `floors` gives it for the window
of `tail` steps ending at each step, the same window L_K averages.

`tied` is the floor of a model that gives some rows of the batch one output (`tied_floor`):
a bigram table sees one token, and a batch in which a token is followed by different ones
cannot be memorised by it; nor can exact duplicates with different labels.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import torch

from leaky import ops

_LINEAR = 1e-4   # |L - Σ c_k v_k| within this share of |L| (float32 sums): L is the weighted sum


@dataclass
class Term:
    key: tuple                      # (loss name, where, call): the same call at every step
    name: str
    value: float | torch.Tensor     # its value (0-d, detached)
    output: int                     # id of the model output it reads: terms on one output mix
    coefficient: torch.Tensor | None = None   # dL/dv in the step's first backward (None: not reached)


class LossTerms:
    """The loss calls of every step and their coefficients (see the module doc)."""

    def __init__(self) -> None:
        self.steps: list[list[Term]] = [[]]
        self.arguments: dict[tuple, dict] = {}   # key -> the call's bound arguments (tensors detached)
        self.latest: tuple[str, dict] | None = None   # the last known loss call: (name, bound arguments)
        self._backwards = 0
        self._signatures: dict = {}

    def note(self, func, args, kwargs, out, key: tuple) -> None:
        """A call outside the model: keep it if it is a known loss reduced to one number."""
        name = getattr(func, "__name__", "")
        if name not in ops.losses.FLOORS or not isinstance(out, torch.Tensor) or out.numel() != 1 \
                or not out.requires_grad:
            return
        try:
            signature = self._signatures.setdefault(name, inspect.signature(func))
            bound = dict(signature.bind(*args, **kwargs).arguments)
        except (TypeError, ValueError):
            return
        first = bound.get("input")
        term = Term((name,) + key, name, out.detach().reshape(()), id(first))
        detached = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in bound.items()}
        if term.key not in self.arguments:
            self.arguments[term.key] = detached
        self.latest = (name, detached)
        try:
            out.register_hook(self._hook(term))
        except RuntimeError:
            return   # a tensor that takes no hook: its weight stays unknown
        self.steps[-1].append(term)

    def _hook(self, term: Term):
        def read(grad):
            if term.coefficient is None and self._backwards <= 1:
                term.coefficient = grad.detach().reshape(())
            return None
        return read

    def note_backward(self) -> None:
        self._backwards += 1

    def next_step(self) -> None:
        self.steps.append([])
        self._backwards = 0

    # -- the floors ------------------------------------------------------------------------
    def first(self) -> list[tuple[str, float | None, float]]:
        """The first step's loss calls: (loss, its own floor, its value)."""
        return [(t.name, ops.losses.floor_of(t.name, self.arguments[t.key]), float(t.value)) for t in self.steps[0]]

    def floors(self, losses: list[float], tail: int) -> tuple[list[float], str] | None:
        """The floor of the mean loss over the `tail` steps ending at each step (1 .. K), and
        what it is in words; None when a step's loss is not the weighted sum of known losses."""
        weights: list[dict[tuple, float] | None] = [self._weights(i, loss) for i, loss in enumerate(losses)]
        if any(w is None for w in weights):
            return None
        out, mixed, varying = [], False, False
        for end in range(1, len(losses) + 1):
            window = weights[max(0, end - tail):end]
            mean = {k: sum(w.get(k, 0.0) for w in window) / len(window) for w in window for k in w}
            floor, many = self._floor(mean, end - 1)
            if floor is None:
                return None
            out.append(floor)
            mixed = mixed or many
            varying = varying or any(not math.isclose(w.get(k, 0.0), mean[k], rel_tol=1e-6, abs_tol=1e-12)
                                     for w in window for k in mean)
        return out, self._what(out, mixed, varying)

    def _weights(self, step: int, loss: float) -> dict[tuple, float] | None:
        terms = [t for t in self.steps[step] if t.coefficient is not None] if step < len(self.steps) else []
        if not terms or not math.isfinite(loss):
            return None
        weights = {t.key: float(t.coefficient) for t in terms}
        total = sum(float(t.coefficient) * float(t.value) for t in terms)
        if not math.isclose(total, loss, rel_tol=_LINEAR, abs_tol=1e-7):
            return None   # not L = Σ c_k v_k: another term (a penalty), or the losses combined otherwise
        return weights

    def _floor(self, weights: dict[tuple, float], step: int) -> tuple[float | None, bool]:
        """Σ over the model outputs of the floor of the weighted terms on each."""
        groups: dict[tuple, list[tuple]] = {}
        outputs = {t.key: t.output for t in self.steps[step]}
        for key in weights:
            groups.setdefault((outputs.get(key, key), key[0]), []).append(key)
        total, many = 0.0, False
        for (_, name), keys in groups.items():
            parts = [(weights[k], self.arguments[k]) for k in keys if weights[k] != 0.0]
            if not parts:
                continue
            floor = ops.losses.mixed_floor(name, parts)
            if floor is None:
                return None, many
            total += floor
            many = many or len(parts) > 1
        return total, many

    def _what(self, floors: list[float], mixed: bool, varying: bool) -> str:
        names = sorted({t.name for t in self.steps[0]})
        loss = " + ".join(names)
        if mixed:
            text = f"{loss}: weighted terms on one output (mixup): the entropy of their weighted target"
        elif all(f == 0.0 for f in floors):
            text = f"{loss}: an exact fit scores 0"
        else:
            text = f"{loss}: the entropy of its soft targets"
        if varying:
            text += "; the weights change every step, so each window of steps has its own floor"
        return text

    def tied(self, loss: float) -> tuple[float, int, int] | None:
        """`tied_floor` of the last loss call, when the last step's loss is that one call."""
        terms = next((t for t in reversed(self.steps) if t), [])
        if self.latest is None or len(terms) != 1 or not math.isclose(float(terms[0].value), loss, rel_tol=1e-6):
            return None
        return tied_floor(*self.latest)


def tied_floor(name: str, arguments: dict) -> tuple[float, int, int] | None:
    """The least the loss can be for a model that gives the rows it now gives one output that
    output still: (floor, distinct outputs, rows). The rows of one output can at best score
    their targets' spread: over classes (cross-entropy, NLL on hard labels) the entropy of their
    labels; on values (mse) the variance of their targets. None unless the loss is one of those,
    and the model gives more than one output but fewer than one per row (one output for every
    row is a model that ignores its input: a fault, not a floor)."""
    kind = ops.loss_neutral(name)
    z, t = arguments.get("input"), arguments.get("target")
    if not isinstance(z, torch.Tensor) or not isinstance(t, torch.Tensor) or z.dim() < 1:
        return None
    if kind == ops.losses.CLASSES:
        if t.is_floating_point() or z.dim() < 2 or float(arguments.get("label_smoothing", 0.0) or 0.0) \
                or arguments.get("weight") is not None:
            return None
        z, t = z.movedim(1, -1).reshape(-1, z.shape[1]), t.reshape(-1)
        keep = t != arguments.get("ignore_index", -100)
        z, t = z[keep], t[keep]
    elif kind == ops.losses.VARIANCE and t.shape == z.shape:
        z, t = z.reshape(len(z), -1), t.reshape(len(t), -1).float()
    else:
        return None
    if len(z) < 2:
        return None
    _, group = torch.unique(z, dim=0, return_inverse=True)
    distinct = int(group.max()) + 1
    if distinct in (1, len(z)):
        return None
    per_row = _class_spread(group, t, distinct) if kind == ops.losses.CLASSES else _value_spread(group, t, distinct)
    reduction = arguments.get("reduction", "mean")
    scale = 1.0 if reduction == "mean" else float(t.numel()) if reduction == "sum" else None
    return None if scale is None else (float(per_row) * scale, distinct, len(z))


def _class_spread(group: torch.Tensor, t: torch.Tensor, distinct: int) -> torch.Tensor:
    """The mean over rows of the entropy of the labels of the rows given the same output."""
    ones = torch.ones(len(t), device=t.device)
    counts = torch.zeros(distinct, int(t.max()) + 1, device=t.device).index_put_((group, t.long()), ones, accumulate=True)
    p = counts / counts.sum(1, keepdim=True)
    return (counts.sum(1) * -torch.special.xlogy(p, p).sum(1)).sum() / len(t)


def _value_spread(group: torch.Tensor, t: torch.Tensor, distinct: int) -> torch.Tensor:
    """The mean over elements of the variance of the targets of the rows given the same output."""
    n = torch.zeros(distinct, device=t.device).index_add_(0, group, torch.ones(len(t), device=t.device))[:, None]
    mean = torch.zeros(distinct, t.shape[1], device=t.device).index_add_(0, group, t) / n
    return (t - mean[group]).pow(2).mean()

