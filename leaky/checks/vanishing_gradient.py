"""LK103 vanishing-gradient: the gradient shrinks by orders of magnitude toward the input.

By the chain rule the gradient at an early layer is the product of the local Jacobians of
everything after it, dL/dh_1 = J_2^T J_3^T ... dL/dh_n, so a few factors well below 1 (each
sigmoid contributes at most 1/4) make it exponentially small. leaky compares the gradient
norm entering the earliest parameterised module with the one entering the latest, and
names the ops whose local gain (||grad out|| / ||grad in||) lost the most.
"""
from __future__ import annotations

import math

from leaky.checks import register
from leaky.checks._depth import depth_profile, describe, worst_ops
from leaky.checks._util import num, severity_below
from leaky.config import AuditConfig
from leaky.finding import Finding
from leaky.stats import AuditStats


@register("LK103", "vanishing-gradient", "the gradient norm collapses by orders of magnitude toward the input")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    profile = depth_profile(stats)
    if profile is None or profile.ratio <= 0:
        return []
    severity = severity_below(profile.ratio, config.vanishing_warning, config.vanishing_error)
    if severity is None:
        return []
    culprits = worst_ops(profile.path, shrinking=True, config=config)
    orders = -math.log10(profile.ratio)
    lost = "; ".join(describe(op) for op in culprits) or "spread over many ops"
    first, last = profile.earliest, profile.latest
    message = (f"the gradient entering {first.module} is {num(profile.ratio)} of the one entering "
               f"{last.module} ({orders:.1f} orders of magnitude lost over {profile.modules} "
               f"parameterised modules). Most is lost at: {lost}.")
    fix = ("Keep each local gain near 1: use ReLU/GELU instead of sigmoid/tanh in hidden layers, "
           "initialise with nn.init.kaiming_normal_ (ReLU) or xavier_uniform_ (tanh), add "
           "residual connections or LayerNorm/BatchNorm between layers.")
    top = culprits[0] if culprits else first
    evidence = {"ratio": profile.ratio, "orders_of_magnitude": orders,
                "earliest_module": first.module, "earliest_grad_norm": first.grad_in,
                "latest_module": last.module, "latest_grad_norm": last.grad_in,
                "lossy_ops": [{"op": op.op, "module": op.module, "line": op.source.line if op.source else None,
                               "gain": op.gain} for op in culprits]}
    return [Finding("vanishing-gradient", "LK103", severity, message, fix, top.module, top.op,
                    top.source, None, evidence)]
