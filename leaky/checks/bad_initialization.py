"""LK302 bad-initialization: the forward signal grows or shrinks geometrically with depth,
a weight's scale is far from its fan-in scale, or a layer's units are all identical.

For y = W x with i.i.d. weights of std s and fan-in n, Var(y) = n s^2 Var(x): a layer
multiplies the signal's scale by sqrt(n) s. Kaiming (ReLU, which halves the variance) uses
s = sqrt(2/n); Xavier (tanh/sigmoid) uses s = sqrt(2/(n_in + n_out)). Off by a factor g
per layer, the signal after L layers is off by g^L. Units with identical weights compute
the same output and get the same gradient, so no amount of training separates them.
Everything here is measured on the first observed step: the initialisation.

What it explains (`@explainer`): the saturation (LK101) of the sigmoid/tanh right after an
over-scaled weight, when the weight alone puts it there: on standardised inputs its units'
pre-activations have scale sqrt(n)·s, and a Gaussian of that scale has P(|z| > e) in the
flat region (e its edge, ~6 for sigmoid), at or above LK101's warning share.
"""
from __future__ import annotations

import math

from leaky.checks import explainer, register
from leaky.checks._layers import expected_std, flat_share_at, following_activation
from leaky.checks._util import num, pct, severity_above
from leaky.config import AuditConfig
from leaky.finding import Cause, Finding, Severity
from leaky.stats import AuditStats, WeightStats


@register("LK302", "bad-initialization", "the forward signal grows or shrinks geometrically with depth, or units are symmetric")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = [f for w in stats.weights for f in (_symmetric(w, stats), _scale(w, stats, config)) if f is not None]
    depth = _depth(stats, config)
    if depth is not None:
        findings.append(depth)
    return findings


def _symmetric(weight: WeightStats, stats: AuditStats) -> Finding | None:
    # NOTE: all-zero weights are a deliberate choice (a zero-initialised output layer or
    # residual branch): each unit's gradient then differs through its own target, so they
    # are not judged here.
    if not weight.rows_identical or weight.shape[0] < 2 or weight.std == 0:
        return None
    op = stats.op(weight.site)
    message = (f"all {weight.shape[0]} units of {weight.module} start with identical weights and bias: they "
               "compute the same output, and their gradients differ only through the next layer's weights; "
               "if those are symmetric too, training can never make the units differ and the layer acts "
               "as one unit.")
    act = following_activation(stats, weight.site)
    _, init = expected_std(act.family if act else None, weight.fan_in, weight.fan_out)
    fix = f"Break the symmetry with a random init: {init} (or its default), not a constant."
    return Finding("bad-initialization", "LK302", Severity.ERROR, message, fix, weight.module,
                   op.op if op else weight.kind, _where(weight, op), None,
                   {"units": weight.shape[0], "parameter": f"{weight.module}.{weight.param}"},
                   init_cause(stats, weight, "identical rows"))


def init_cause(stats: AuditStats, weight: WeightStats | None, what: str) -> Cause | None:
    """The line that set this weight's initial values: the user's `nn.init` call (or in-place
    write) when leaky saw one, else the layer's construction, where its default init ran."""
    if weight is None:
        return None
    if weight.init_source is not None:
        return Cause.at(weight.init_source, f"{weight.module}.{weight.param} initialised here ({what})")
    name = f"{weight.module}.{weight.param}" if weight.module else weight.param
    param = next((p for p in stats.params if p.name == name), None)
    if param is None or param.source is None:
        return None
    return Cause.at(param.source, f"{name} built here with its default init ({what})")


def _where(weight: WeightStats, op):
    """The line that initialised the weight when leaky saw it; else where the layer runs."""
    return weight.init_source or (op.source if op else None)


def _scale(weight: WeightStats, stats: AuditStats, config: AuditConfig) -> Finding | None:
    act = following_activation(stats, weight.site)
    family = act.family if act is not None else None
    expected, init = expected_std(family, weight.fan_in, weight.fan_out)
    ratio = weight.std / expected if expected else 0.0
    severity = severity_above(ratio, config.init_scale_warning, config.init_scale_error)
    if severity is None:
        return None
    op = stats.op(weight.site)
    after = f"the {family} after it" if family else "no nonlinearity after it"
    gain = math.sqrt(weight.fan_in) * weight.std
    message = (f"{weight.module}.{weight.param} starts with std {num(weight.std)}, {num(ratio)}× the fan-based "
               f"std {num(expected)} for fan-in {weight.fan_in} and {after}: each unit's pre-activation is "
               f"sqrt(fan_in)·std ≈ {num(gain)}× its input's scale.")
    evidence = {"std": weight.std, "expected_std": expected, "ratio": ratio, "fan_in": weight.fan_in,
                "fan_out": weight.fan_out, "next_nonlinearity": family}
    # NOTE: a sigmoid/tanh whose own input goes around it (x·σ(x), GELU-tanh: record/bypass.py)
    # passes the gradient on through the other factor: its flat region is no harm of the scale
    alone = flat_share_at(family, gain, config) if act is not None and act.bypass_site is None else None
    if alone is not None and alone >= config.saturated_warning:
        # what LK101 at that activation follows from (the explainer below)
        evidence["saturates"] = {"module": act.module, "op": act.op, "flat_share_on_standardised_inputs": alone}
        message += (f" Even on standardised inputs {pct(alone)} of {act.module or act.op}'s pre-activations "
                    f"would sit in the flat region of {family}.")
    return Finding("bad-initialization", "LK302", severity, message, f"Re-initialise it: {init}.", weight.module,
                   op.op if op else weight.kind, _where(weight, op), None, evidence,
                   init_cause(stats, weight, f"std {num(weight.std)}, {num(ratio)}× the fan-based {num(expected)}"))


@explainer("LK302")
def _explains_the_saturation_it_causes(root: Finding, symptom: Finding) -> str | None:
    """The saturated sigmoid/tanh (LK101) right after the over-scaled weight, when the weight
    alone, on standardised inputs, would leave at least LK101's warning share of it flat."""
    saturates = root.evidence.get("saturates")
    if symptom.code != "LK101" or not saturates or symptom.module != saturates["module"] \
            or symptom.op != saturates["op"]:
        return None
    gain = math.sqrt(root.evidence["fan_in"]) * root.evidence["std"]
    return (f"{root.module}'s weights alone scale each pre-activation of {symptom.module or symptom.op} to "
            f"{num(gain)}× its input's, so that even on standardised inputs "
            f"{pct(saturates['flat_share_on_standardised_inputs'])} of them would sit in the flat region")


def _depth(stats: AuditStats, config: AuditConfig) -> Finding | None:
    layers = sorted((stats.op(w.site) for w in stats.weights), key=lambda op: op.first_seq if op else 0)
    layers = [op for op in layers if op is not None and op.out_rms and math.isfinite(op.out_rms)]
    if len(layers) < config.init_depth_min_layers:
        return None
    logs = [math.log10(op.out_rms) for op in layers]
    orders = logs[-1] - logs[0]
    steps = [b - a for a, b in zip(logs, logs[1:])]
    same_way = sum(1 for s in steps if s * orders > 0) / len(steps)
    severity = severity_above(abs(orders), config.init_depth_warning, config.init_depth_error)
    if severity is None or same_way < config.init_depth_consistent:
        return None
    worst = max(range(len(steps)), key=lambda i: abs(steps[i]) if steps[i] * orders > 0 else -1)
    culprit = layers[worst + 1]
    way = "grows" if orders > 0 else "shrinks"
    per_layer = 10 ** (orders / (len(layers) - 1))
    message = (f"the forward signal {way} geometrically with depth: the output scale (RMS) of the "
               f"{len(layers)} layers goes from {num(layers[0].out_rms)} at {layers[0].module} to "
               f"{num(layers[-1].out_rms)} at {layers[-1].module} ({abs(orders):.1f} orders of magnitude, "
               f"×{num(per_layer)} per layer); the largest step is at {culprit.module}.")
    fix = ("Initialise each layer for the nonlinearity after it (nn.init.kaiming_normal_ for ReLU, "
           "nn.init.xavier_normal_ for tanh/sigmoid), or add normalisation (LayerNorm/BatchNorm) between layers.")
    evidence = {"orders_of_magnitude": orders, "per_layer_gain": per_layer,
                "layer_rms": [{"module": op.module, "rms": op.out_rms} for op in layers]}
    weight = next((w for w in stats.weights if w.site == culprit.site), None)
    source = weight.init_source if weight is not None and weight.init_source else culprit.source
    return Finding("bad-initialization", "LK302", severity, message, fix, culprit.module, culprit.op,
                   source, 0, evidence, init_cause(stats, weight, f"where the scale steps most; ×{num(per_layer)} per layer on average"))
