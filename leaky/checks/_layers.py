"""Which nonlinearity follows a layer: LK302 and LK303 both need it."""
from __future__ import annotations

import math

from leaky.stats import ActivationStats, AuditStats

_LAYER_OPS = {"linear", "conv1d", "conv2d", "conv3d", "bilinear"}


def following_activation(stats: AuditStats, site: int) -> ActivationStats | None:
    """The first activation after this layer op in forward order, if no other layer op
    comes between them."""
    layer = stats.op(site)
    if layer is None:
        return None
    later_layers = [op.first_seq for op in stats.ops if op.op in _LAYER_OPS and op.first_seq > layer.first_seq]
    limit = min(later_layers, default=math.inf)
    best, best_seq = None, math.inf
    for act in stats.activations:
        op = stats.op(act.site)
        if op is not None and layer.first_seq < op.first_seq < min(limit, best_seq):
            best, best_seq = act, op.first_seq
    return best


def expected_std(family: str | None, fan_in: int, fan_out: int) -> tuple[float, str]:
    """The fan-based weight std for the nonlinearity that follows, and the init to use."""
    if family == "relu":
        return math.sqrt(2.0 / fan_in), "nn.init.kaiming_normal_(layer.weight, nonlinearity='relu')"
    if family in ("tanh", "sigmoid", "softmax", "hardtanh"):
        return math.sqrt(2.0 / (fan_in + fan_out)), "nn.init.xavier_normal_(layer.weight)"
    return math.sqrt(1.0 / fan_in), "nn.init.kaiming_normal_(layer.weight, nonlinearity='linear')"
