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
from leaky.checks._loss import change_bound, curve_of, objectives
from leaky.checks._optim import group_lrs, lr_cause, lr_origin, optimizer_of
from leaky.checks._util import num, severity_above
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.optimizers import rule_of
from leaky.stats import AuditStats, ParamStats


@register("LK202", "update-ratio", "the update/weight ratio is far from ~1e-3 (learning rate too high or too low)")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    slow: dict[tuple, list[tuple[ParamStats, dict]]] = {}
    for param in stats.params:
        if len(param.shape) < 2 or param.update_ratio is None or len(param.update_ratios) < config.update_min_steps:
            continue
        optimizer = optimizer_of(stats, param)
        if optimizer is not None and not rule_of(optimizer).banded:
            continue
        severity = _high_severity(param, config)
        if severity is not None:
            findings.append(_high(param, severity, config, stats))
        elif (measure := _slow(param, config, stats)) is not None:
            slow.setdefault((param.optimizer, param.group), []).append((param, measure))
        elif param.update_ratio_max is not None and 0 < param.update_ratio_max < config.update_low:
            findings.append(_low(param, config, stats))
    findings.extend(_too_slow(group, config, stats) for group in slow.values())
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
    message = (f"steps change {param.name} by a median {num(param.update_ratio)}× its norm (||Δw||/||w|| over "
               f"{len(param.update_ratios)} sampled steps, at most {num(param.update_ratio_max)}; ~1e-3 is typical, "
               f"leaky's band is {_band(config)}){worst}: the learning rate is too high for this layer.")
    source, origin = lr_origin(stats, param, "high", config)
    fix = ("Lower the learning rate (×0.1), or give this layer its own param group with a smaller lr; "
           "a warmup schedule helps when the ratio is high only at the start.")
    return Finding("update-ratio", "LK202", severity, message + origin, fix, param.module, None, source,
                   param.update_ratios[-1][0], {**_evidence(param, config), "direction": "high"},
                   lr_cause(stats, param, "high", config))


def _slow(param: ParamStats, config: AuditConfig, stats: AuditStats) -> dict | None:
    """An Adam-family weight whose learning rate is too small for it ever to change: its
    rule moves each element by about lr per step at most, so ||Δw||/||w|| <~ lr / rms(w)
    (lr alone, whatever the gradient); neither that bound nor any sampled step comes near a
    `update_material_change` move in `update_slow_steps` steps. Returns the numbers."""
    optimizer = optimizer_of(stats, param)
    if optimizer is None or not rule_of(optimizer).per_element_lr or not param.weight_norm:
        return None
    _, seen = group_lrs(optimizer, param.group)
    if seen is None or not seen[1] > 0:
        return None
    rms = param.weight_norm / math.sqrt(math.prod(param.shape))
    bound = seen[1] / rms
    target = config.update_material_change / config.update_slow_steps
    if bound >= target or param.update_ratio_max is None or param.update_ratio_max >= target:
        return None
    change = config.update_material_change
    measured = param.update_ratio
    return {"lr": seen[1], "weight_rms": rms, "ratio_bound": bound,
            "steps_to_change": change / measured if measured else math.inf,
            "steps_to_change_at_bound": change / bound, "material_change": change}


def _too_slow(slow: list[tuple[ParamStats, dict]], config: AuditConfig, stats: AuditStats) -> Finding:
    """One finding per param group whose weights are too slow: it names the fastest of them
    (the most the rate can do), and the learning rate's line."""
    param, measure = max(slow, key=lambda item: item[1]["ratio_bound"])
    optimizer = optimizer_of(stats, param)
    rule = rule_of(optimizer)
    change, measured = measure["material_change"], param.update_ratio
    others = (f" The same holds for {len(slow) - 1} more weight(s) of its param group "
              f"({', '.join(p.name for p, _ in slow if p is not param)[:200]}), which move even more slowly."
              if len(slow) > 1 else "")
    message = (f"{optimizer.kind} moves each element of a weight by about lr per step at most ({rule.update}), "
               f"so ||Δw||/||w|| <~ lr / rms(w) = {num(measure['lr'])} / {num(measure['weight_rms'])} = "
               f"{num(measure['ratio_bound'])} for {param.name}; the sampled steps changed it by a median "
               f"{num(measured)}× its norm (at most {num(param.update_ratio_max)}). At that rate it needs "
               f"~{_count(measure['steps_to_change'])} steps to change by {100 * change:g}% "
               f"(~{_count(1 / measured if measured else math.inf)} to move by its own norm), and at least "
               f"{_count(measure['steps_to_change_at_bound'])} even if every step moved it the most the rule allows: "
               f"the learning rate is too small for it to train.{others}")
    severity, falls = _falling(stats, param.optimizer, config)
    source, origin = lr_origin(stats, param, "low", config)
    fix = (f"Raise the learning rate: with {optimizer.kind}, lr ≈ 1e-3 × rms(w) (here ~{num(1e-3 * measure['weight_rms'])}) "
           "moves a weight by ~1e-3× its norm per step; 1e-4 to 1e-3 is usual from scratch, 1e-5 for fine-tuning.")
    evidence = {**_evidence(param, config), "direction": "low", **measure,
                "slow_parameters": [p.name for p, _ in slow]}
    return Finding("update-ratio", "LK202", severity, message + origin + falls, fix, param.module, None, source,
                   param.update_ratios[-1][0], evidence, lr_cause(stats, param, "low", config))


def _falling(stats: AuditStats, index: int | None, config: AuditConfig) -> tuple[Severity, str]:
    """Warning while this optimizer's loss does not fall; info, saying so, while it falls by
    `loss_flat_share` or more over the observed steps: tiny steps that still lower the loss
    can be by design (fine-tuning that must stay near its start)."""
    objective = next((o for o in objectives(stats, config) if o.optimizer == index), None)
    curve = None if objective is None else curve_of(objective.rows, config.loss_min_steps)
    if curve is None or not (math.isfinite(curve.start) and math.isfinite(curve.end)) or curve.start == 0:
        return Severity.WARNING, ""
    drop = (curve.start - curve.end) / abs(curve.start)
    if drop < config.loss_flat_share:
        return Severity.WARNING, ""
    # NOTE: |ΔL| per step <= Σ ||g||·||Δw|| at first order: a drop the updates could not have
    # made even a tenth of (loss_stuck_share) is the batches' noise, not learning.
    bound = change_bound(stats, objective)
    if bound is not None and bound * curve.steps < config.loss_stuck_share * drop * abs(curve.start):
        return Severity.WARNING, (f" The loss moved {100 * drop:.1f}% over the {curve.steps} observed steps, but at "
                                  f"first order the updates could change it by at most Σ ||g||·||Δw|| = {num(bound)} "
                                  f"per step ({num(bound * curve.steps)} in all): that change is the batches' noise, "
                                  "not learning.")
    return Severity.INFO, (f" The loss still fell {100 * drop:.1f}% over the {curve.steps} observed steps, so steps "
                           "this small may be by design (fine-tuning that must stay near its start).")


def _count(steps: float) -> str:
    """A step count in words: 12,000 / 3.4 million / never."""
    if not math.isfinite(steps):
        return "infinitely many"
    if steps >= 1e6:
        return f"{steps / 1e6:.2g} million"
    return f"{int(round(steps, -2 if steps >= 1e3 else 0)):,}"


def _low(param: ParamStats, config: AuditConfig, stats: AuditStats) -> Finding:
    message = (f"no sampled step changed {param.name} by more than {num(param.update_ratio_max)}× its norm "
               f"(||Δw||/||w||; ~1e-3 is typical, leaky's band is {_band(config)}): the layer is effectively "
               "frozen, because the learning rate is too low or its gradients vanish.")
    source, origin = lr_origin(stats, param, "low", config)
    fix = ("Raise the learning rate (×10) for this layer's param group; if its gradients are tiny, see "
           "LK103 vanishing-gradient for where they are lost.")
    # NOTE: a frozen weight is the learning rate's doing for sure only under a rule whose
    # step lr alone sets (Adam's); under SGD's lr·||g|| vanishing gradients freeze it too.
    optimizer = optimizer_of(stats, param)
    by_lr = optimizer is not None and rule_of(optimizer).per_element_lr
    return Finding("update-ratio", "LK202", Severity.WARNING, message + origin, fix, param.module, None, source,
                   param.update_ratios[-1][0], {**_evidence(param, config), "direction": "low"},
                   lr_cause(stats, param, "low", config) if by_lr else None)


def _evidence(param: ParamStats, config: AuditConfig) -> dict:
    return {"parameter": param.name, "median_ratio": param.update_ratio, "max_ratio": param.update_ratio_max,
            "band": [config.update_low, config.update_high_warning], "sampled_steps": len(param.update_ratios),
            "ratios": [{"step": s, "ratio": r} for s, r in param.update_ratios[-16:]]}
