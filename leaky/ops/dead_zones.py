"""Ops whose local derivative is exactly 0 on some elements by design: clamps, steps, and
selections. LK106 judges the share of gradient they zero; `leaky fix` offers a
straight-through replacement for clamps and steps.

    d/dx clamp(x, lo, hi) = 1 if lo <= x <= hi else 0
    d/dx round(x) = d/dx floor(x) = d/dx sign(x) = 0   (almost everywhere)
    where(cond, a, b) sends each element's gradient only to the branch it selected

NOTE: clamp's gradient at exactly lo or hi is 1 in PyTorch (the bound is inside).
"""
from __future__ import annotations

from typing import Any

from leaky.ops.rule import BOUNDS, FILL, STRAIGHT_THROUGH, OpRule, Zone, register

CLAMP = Zone(
    "clamp", "d/dx clamp(x, lo, hi) = 1 inside [lo, hi] and 0 outside",
    "If this clamps an error term to limit its gradient, use F.smooth_l1_loss / nn.HuberLoss "
    "(the gradient is clipped to ±1, never zeroed) or clip gradients with "
    "torch.nn.utils.clip_grad_norm_ after backward(). If it clamps a prediction, clamp only for "
    "reporting under torch.no_grad(), or pass the gradient straight through: "
    "x + (x.clamp(lo, hi) - x).detach().")
STEP = Zone(
    "step", "the derivative of a step function (round/floor/ceil/trunc/sign) is 0 almost everywhere",
    "Use a straight-through estimator so the backward pass sees the identity: "
    "x + (torch.round(x) - x).detach().")
SELECT = Zone(
    "select", "where(cond, a, b) sends each element's gradient only to the branch it selected",
    "Check that the masked share is intended; to mask a loss, weight it (loss * mask) and "
    "normalise by mask.sum().")


def _plain(value: Any):
    """A bound as a Python number; a tensor bound is not read (reading it would sync the device)."""
    if hasattr(value, "shape"):
        return None
    return value


def clamp_bounds(args: tuple, kwargs: dict) -> tuple:
    low = kwargs.get("min", args[1] if len(args) > 1 else None)
    high = kwargs.get("max", args[2] if len(args) > 2 else None)
    return _plain(low), _plain(high)


def clamp_max_bounds(args: tuple, kwargs: dict) -> tuple:
    low, _ = clamp_bounds(args, kwargs)
    return None, low   # clamp_max(x, m): its one bound is the upper one


register(OpRule("clamp", ("clamp_", "clip", "clip_"), ("ClampBackward",), CLAMP.derivative, zero=CLAMP,
                counts_zeros=True, keeps_finite=True, bounds=clamp_bounds, replacement=STRAIGHT_THROUGH,
                detail=BOUNDS))
register(OpRule("clamp_min", ("clamp_min_",), ("ClampMinBackward",), CLAMP.derivative, zero=CLAMP, counts_zeros=True,
                keeps_finite=True, bounds=clamp_bounds, replacement=STRAIGHT_THROUGH, detail=BOUNDS))
register(OpRule("clamp_max", ("clamp_max_",), ("ClampMaxBackward",), CLAMP.derivative, zero=CLAMP, counts_zeros=True,
                keeps_finite=True, bounds=clamp_max_bounds, replacement=STRAIGHT_THROUGH, detail=BOUNDS))
for _name, _node in (("round", "RoundBackward"), ("floor", "FloorBackward"), ("ceil", "CeilBackward"),
                     ("trunc", "TruncBackward"), ("sign", "SignBackward")):
    register(OpRule(_name, (f"{_name}_",), (_node,), STEP.derivative, zero=STEP, counts_zeros=True,
                    replacement=STRAIGHT_THROUGH))
register(OpRule("sgn", ("sgn_",), ("SgnBackward",), STEP.derivative, zero=STEP, counts_zeros=True))
register(OpRule("where", (), ("WhereBackward",), SELECT.derivative, zero=SELECT, counts_zeros=True, selects=True))
register(OpRule("masked_fill", ("masked_fill_",), ("MaskedFillBackward",), SELECT.derivative, zero=SELECT,
                counts_zeros=True, selects=True, detail=FILL, extra={"mask_at": 1, "value_at": 2}))
