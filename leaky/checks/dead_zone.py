"""LK106 dead-zone: an op whose local derivative is exactly 0 on many elements.

    d/dx clamp(x, lo, hi) = 1 if lo <= x <= hi else 0
    d/dx round(x) = d/dx floor(x) = d/dx sign(x) = 0   (almost everywhere)
    d/dx hardtanh(x) = 1 if lo < x < hi else 0
    softmax over a size-1 dim is constant 1: its Jacobian diag(s) - s s^T = 0

The share is measured on the gradient itself: of the elements whose arriving gradient is
nonzero, how many leave this op with a gradient of exactly 0. Elements that were already
zero upstream (a masked attention score, say) do not count. ReLU sparsity is LK102's
business, not this check's.
"""
from __future__ import annotations

from dataclasses import dataclass

from leaky.checks import register
from leaky.checks._util import pct, severity_above
from leaky.config import AuditConfig
from leaky.finding import Finding
from leaky.stats import AuditStats, OpStats


@dataclass(frozen=True)
class ZoneKind:
    derivative: str
    fix: str


_CLAMP = ZoneKind(
    "d/dx clamp(x, lo, hi) = 1 inside [lo, hi] and 0 outside",
    "If this clamps an error term to limit its gradient, use F.smooth_l1_loss / nn.HuberLoss "
    "(the gradient is clipped to ±1, never zeroed) or clip gradients with "
    "torch.nn.utils.clip_grad_norm_ after backward(). If it clamps a prediction, clamp only for "
    "reporting under torch.no_grad(), or pass the gradient straight through: "
    "x + (x.clamp(lo, hi) - x).detach().")
_STEP = ZoneKind(
    "the derivative of a step function (round/floor/ceil/trunc/sign) is 0 almost everywhere",
    "Use a straight-through estimator so the backward pass sees the identity: "
    "x + (torch.round(x) - x).detach().")
_WHERE = ZoneKind(
    "where(cond, a, b) sends each element's gradient only to the branch it selected",
    "Check that the masked share is intended; to mask a loss, weight it (loss * mask) and "
    "normalise by mask.sum().")
_SOFTMAX1 = ZoneKind(
    "softmax over a dimension of size 1 is constant 1, so its Jacobian diag(s) − ssᵀ is 0",
    "For one logit use torch.sigmoid with nn.BCEWithLogitsLoss; otherwise take the softmax over "
    "the class dimension (dim=-1 of a [batch, classes] tensor).")
_HARDTANH = ZoneKind(
    "d/dx hardtanh(x, lo, hi) = 1 strictly inside (lo, hi) and 0 outside",
    "Scale or normalise what feeds it (LayerNorm/BatchNorm), or use a smooth activation such as "
    "tanh or GELU.")

ZONES: dict[str, ZoneKind] = {
    **{op: _CLAMP for op in ("clamp", "clip", "clamp_", "clip_", "clamp_min", "clamp_max", "clamp_min_",
                             "clamp_max_")},
    **{op: _STEP for op in ("round", "floor", "ceil", "trunc", "sign", "sgn", "round_", "floor_",
                            "ceil_", "trunc_", "sign_")},
    **{op: _WHERE for op in ("where", "masked_fill", "masked_fill_")},
    "softmax": _SOFTMAX1, "log_softmax": _SOFTMAX1,
    "hardtanh": _HARDTANH, "hardtanh_": _HARDTANH, "relu6": _HARDTANH,
}


@register("LK106", "dead-zone", "an op whose local derivative is exactly 0 on a large share of elements")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    flat = {act.site: act.flat_share for act in stats.activations}
    findings = []
    for op in stats.ops:
        kind = ZONES.get(op.op)
        if kind is None or op.steps == 0:
            continue
        share = _share(op, kind, flat)
        if share is None:
            continue
        severity = severity_above(share, config.dead_zone_warning, config.dead_zone_error)
        if severity is None:
            continue
        findings.append(_finding(op, kind, share, severity))
    return findings


def _share(op: OpStats, kind: ZoneKind, flat: dict[int, float | None]) -> float | None:
    if kind is _SOFTMAX1 and op.detail.get("dim_size") != 1:
        return None   # an ordinary softmax: zeros come from probabilities that are already 0
    if kind is _HARDTANH:
        return flat.get(op.site)   # upper/lower bound share from the forward pass
    if op.node.startswith(("Clone", "View", "Unsqueeze", "Squeeze", "Expand")):
        return None
    return op.zeroed_share


def _finding(op: OpStats, kind: ZoneKind, share: float, severity) -> Finding:
    bounds = ""
    low, high = op.detail.get("low"), op.detail.get("high")
    if low is not None or high is not None:
        bounds = f" Bounds here: [{'-inf' if low is None else low}, {'inf' if high is None else high}]."
    elements = int(op.nonzero_in)
    message = (f"{op.op} sets the gradient of {pct(share)} of the {elements} elements that reach the loss "
               f"(summed over the steps counted) to exactly 0: {kind.derivative}.{bounds} Nothing upstream of these "
               f"elements learns from them.")
    evidence = {"zeroed_share": share, "elements_reaching_loss": elements, "node": op.node, **op.detail}
    return Finding("dead-zone", "LK106", severity, message, kind.fix, op.module, op.op, op.source, None,
                   evidence)
