"""LK202 update-ratio: ||dw|| / ||w|| per step, per layer, far from the useful band.

The ratio of the update to the weight says how fast a layer changes: about 1e-3 per step
is the classic rule of thumb (Karpathy, CS231n). Far above it, each step rewrites a good
part of the weight: the learning rate is too high for that layer. At 1 or more the update
is larger than the weight itself. Far below it on every sampled step, the layer is
effectively frozen: the learning rate is too low, or its gradients vanish. Only weights
(2 or more dims) are judged: biases often start at 0, where the ratio means nothing.
The finding points at the line that set the rate: the optimizer's construction, or the
scheduler that moved the rate there.

The band assumes one step() is one update from one gradient, scaled by lr (leaky/optimizers.py).
A quasi-Newton step (LBFGS: up to max_iter iterations with a line search per step(closure)),
any step whose closure ran more than once, and Rprop's self-adapting step sizes are not:
their parameters are not judged here, and the run's notes say so.
"""
from __future__ import annotations

import math

from leaky.checks import register
from leaky.checks._optim import lr_origin, optimizer_of
from leaky.checks._util import num, severity_above
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.optimizers import rule_of
from leaky.stats import AuditStats, ParamStats


@register("LK202", "update-ratio", "the update/weight ratio is far from ~1e-3 (learning rate too high or too low)")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    for param in stats.params:
        if len(param.shape) < 2 or param.update_ratio is None or len(param.update_ratios) < config.update_min_steps:
            continue
        optimizer = optimizer_of(stats, param)
        if optimizer is not None and not rule_of(optimizer).banded:
            continue
        severity = _high_severity(param, config)
        if severity is not None:
            findings.append(_high(param, severity, config, stats))
        elif param.update_ratio_max is not None and 0 < param.update_ratio_max < config.update_low:
            findings.append(_low(param, config, stats))
    return findings


def _high_severity(param: ParamStats, config: AuditConfig):
    """Error when the update outgrew the weight itself on `update_error_overshoots` (two) or
    more steps (a blow-up is often over in a few steps, which a median would hide); warning
    when it did on fewer, or when the typical step is above the band."""
    overshoots = sum(1 for _, ratio in param.update_ratios if ratio > config.update_high_error)
    if overshoots >= config.update_error_overshoots:
        return Severity.ERROR
    if overshoots:
        return Severity.WARNING
    return severity_above(param.update_ratio, config.update_high_warning, math.inf)


def _band(config: AuditConfig) -> str:
    return f"[{num(config.update_low)}, {num(config.update_high_warning)}]"


def _high(param: ParamStats, severity, config: AuditConfig, stats: AuditStats) -> Finding:
    overshoots = [(s, r) for s, r in param.update_ratios if r > config.update_high_error]
    worst = f"; at step {overshoots[0][0]} the update was {num(overshoots[0][1])}× the weight itself" \
        if overshoots else ""
    message = (f"steps change {param.name} by a median {num(param.update_ratio)} of its norm (||Δw||/||w|| over "
               f"{len(param.update_ratios)} sampled steps, at most {num(param.update_ratio_max)}; ~1e-3 is typical, "
               f"leaky's band is {_band(config)}){worst}: the learning rate is too high for this layer.")
    source, origin = lr_origin(stats, param, "high", config)
    fix = ("Lower the learning rate (×0.1), or give this layer its own param group with a smaller lr; "
           "a warmup schedule helps when the ratio is high only at the start.")
    return Finding("update-ratio", "LK202", severity, message + origin, fix, param.module, None, source,
                   param.update_ratios[-1][0], {**_evidence(param, config), "direction": "high"})


def _low(param: ParamStats, config: AuditConfig, stats: AuditStats) -> Finding:
    message = (f"no sampled step changed {param.name} by more than {num(param.update_ratio_max)} of its norm "
               f"(||Δw||/||w||; ~1e-3 is typical, leaky's band is {_band(config)}): the layer is effectively "
               "frozen, because the learning rate is too low or its gradients vanish.")
    source, origin = lr_origin(stats, param, "low", config)
    fix = ("Raise the learning rate (×10) for this layer's param group; if its gradients are tiny, see "
           "LK103 vanishing-gradient for where they are lost.")
    return Finding("update-ratio", "LK202", Severity.WARNING, message + origin, fix, param.module, None, source,
                   param.update_ratios[-1][0], {**_evidence(param, config), "direction": "low"})


def _evidence(param: ParamStats, config: AuditConfig) -> dict:
    return {"parameter": param.name, "median_ratio": param.update_ratio, "max_ratio": param.update_ratio_max,
            "band": [config.update_low, config.update_high_warning], "sampled_steps": len(param.update_ratios),
            "ratios": [{"step": s, "ratio": r} for s, r in param.update_ratios[-16:]]}
