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
        if term.key not in self.arguments:
            self.arguments[term.key] = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in bound.items()}
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
