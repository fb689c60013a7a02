"""LK103 vanishing-gradient: the gradient shrinks by orders of magnitude toward the input.

By the chain rule the gradient at an early layer is the product of the local Jacobians of
everything after it, dL/dh_1 = J_2^T J_3^T ... dL/dh_n, so a few factors well below 1 (each
sigmoid contributes at most 1/4) make it exponentially small. leaky compares the gradient
norm entering the earliest parameterised module with the one entering the latest, and
names the ops whose local gain (||grad out|| / ||grad in||) lost the most.

It explains the weights it starves staying put: a module whose entering gradient is below
`vanishing_warning` of the loss end's gets updates lr·step(g) that small too, under any
rule whose step scales with g (SGD; Adam's once g is below its eps). So LK201 (a weight
left exactly unchanged: the update rounds away) and LK202 (a weight frozen from the first
step) on such a module are told under this finding, whose fix is theirs: a larger rate or
a freeze on purpose would not bring the signal back.
"""
from __future__ import annotations

import math

from leaky.checks import explainer, headline, register
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
                               "gain": op.gain} for op in culprits],
                "starved_modules": _starved(stats, last.grad_in, config), "vanishing_warning": config.vanishing_warning}
    return [Finding("vanishing-gradient", "LK103", severity, message, fix, top.module, top.op,
                    top.source, None, evidence)]


def _starved(stats: AuditStats, latest: float, config: AuditConfig) -> list[dict]:
    """The parameterised modules whose entering gradient is below `vanishing_warning` of the
    one entering the latest module: the share that reaches each."""
    return [{"module": row.module, "share": row.grad_norm / latest} for row in stats.module_table
            if row.trainable and not row.recurrent and row.grad_norm is not None and math.isfinite(row.grad_norm)
            and row.grad_norm <= config.vanishing_warning * latest]


@explainer("LK103")
def _explains_a_starved_weight(root: Finding, symptom: Finding) -> str | None:
    """A weight left unchanged (LK201, at the rate as built) or frozen from the first step
    (LK202) in a module that the vanishing gradient starves."""
    unchanged = symptom.code == "LK201" and symptom.evidence.get("cause") == "unchanged by the optimizer" \
        and symptom.cause is None         # NOTE: with a cause, a scheduler shrank the rate: not the gradient
    frozen = symptom.code == "LK202" and symptom.evidence.get("rule") == "frozen"
    share = next((s["share"] for s in root.evidence.get("starved_modules") or () if s["module"] == symptom.module),
                 None)
    if not (unchanged or frozen) or share is None:
        return None
    return (f"the gradient entering {symptom.module} is {num(share)} of the one entering "
            f"{root.evidence.get('latest_module')}, so lr·step(g) is as small")


@headline("LK103", "gradient at the first layer / at the last")
def _headline(finding: Finding, stats: AuditStats):
    profile = depth_profile(stats)
    return num(profile.ratio) if profile is not None else None
