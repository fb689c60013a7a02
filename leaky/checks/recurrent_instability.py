"""LK105 recurrent-instability: a recurrence whose backward pass grows or dies over time.

Backprop through time applies the recurrent Jacobian once per step:

    dL/dh_{t-1} = W_hh^T diag(f'(a_t)) dL/dh_t

so after k steps the gradient scales roughly like rho(W_hh)^k, where rho is the spectral
radius (damped by f' <= 1). rho > 1 with a gradient that grows toward t = 0 explodes;
rho < 1 with a gradient that never reaches the early steps vanishes (checks/_reach.py: how
many steps it reaches back, against the sequence length). A vanishing profile is judged
with the loss: flat, the early steps likely hold what the model needs (warning); falling,
what it learns sits in the steps it reaches (info). Gated cells (LSTM/GRU) route the
gradient around W_hh through the cell state, so for them only a measured explosion counts.
"""
from __future__ import annotations

import math

from leaky.checks import explainer, headline, register
from leaky.checks._reach import Reach, contracting, loss_drop, reach_of
from leaky.checks._util import line_of, num, pct
from leaky.config import AuditConfig
from leaky.finding import Cause, Finding, Severity
from leaky.stats import AuditStats, RecurrenceStats, thin

_FIX_EXPLODE = ("Clip the gradient norm after backward(): "
                "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); initialise the recurrent "
                "weight orthogonally (nn.init.orthogonal_, rho = 1), or use nn.LSTM/nn.GRU.")


@register("LK105", "recurrent-instability", "a recurrence matrix with spectral radius far from 1, and its time profile")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    for rec in stats.recurrences:
        finding = _judge(rec, config) or _vanishing(stats, rec, config)
        if finding is not None:
            findings.append(finding)
    return findings


def _growth(profile: tuple[float, ...] | None) -> float | None:
    """Gradient norm at the first time step over the one at the last."""
    if not profile or len(profile) < 2:
        return None
    first, last = profile[0], profile[-1]
    if not (math.isfinite(first) and math.isfinite(last)) or last <= 0:
        return None
    return first / last


def _judge(rec: RecurrenceStats, config: AuditConfig) -> Finding | None:
    rho, growth = rec.spectral_radius, _growth(rec.profile)
    severity, what = None, ""
    if growth is not None and growth >= config.time_growth and (rho > config.radius_high or rec.gated):
        severity, what = Severity.ERROR, "grows"
    elif growth is not None and growth >= math.sqrt(config.time_growth) and rho > config.radius_high \
            and not rec.gated:
        severity, what = Severity.WARNING, "grows"
    elif growth is None and rho > 2 * config.radius_high and not rec.gated:
        severity, what = Severity.WARNING, "cannot be measured per time step on this backend, but"
    if severity is None:
        return None
    steps = len(rec.profile) if rec.profile else 0
    ratio = num(growth)
    trend = (f"the gradient reaching time step 0 is {ratio}× the one at step {steps - 1}"
             if growth is not None else "the per-time-step profile is unavailable")
    message = (f"{rec.module}.{rec.param} has spectral radius ρ = {rho:.3g}; backprop through time "
               f"multiplies by W_hhᵀ·diag(f′) each step, so the gradient {what} over {steps} steps: "
               f"{trend}.")
    op = rec.op
    evidence = {"spectral_radius": rho, "kind": rec.kind, "time_steps": steps, "growth_first_over_last": growth,
                "profile": list(thin(rec.profile)) if rec.profile else None, "direction": "grows"}
    return Finding("recurrent-instability", "LK105", severity, message, _FIX_EXPLODE, rec.module,
                   op.op if op else rec.kind, op.source if op else None, None, evidence)


def _vanishing(stats: AuditStats, rec: RecurrenceStats, config: AuditConfig) -> Finding | None:
    """A plain recurrence whose W contracts the gradient before it reaches step 0."""
    reach = None if rec.gated else reach_of(rec.profile, config.time_decay)
    if reach is None or reach.first_share > config.time_decay or not contracting(rec, reach, config):
        return None
    judged = loss_drop(stats, rec, config)
    if judged is None and rec.spectral_radius >= config.radius_low:
        return None   # a radius near the usual inits' (~0.58 for nn.RNN's) says nothing without the loss
    severity, verdict = _verdict(reach, judged, config)
    name = f"{rec.module}.{rec.param}" if rec.module else rec.param
    message = _reach_text(rec, name, reach, config) + verdict
    init = _init_line(stats, rec, name)
    op = rec.op
    source = op.source if op else None
    made = "initialised" if rec.init_source is not None else "created with its initial values"
    cause = None if init is None or init == source else Cause.at(
        init, f"{rec.param} {made} here; ρ({rec.param}) = {rec.spectral_radius:.3g}")
    at = f", at {line_of(init)}" if init else ""
    fix = (f"Initialise {name} orthogonally, so that ρ = 1 (nn.init.orthogonal_{at}); or use "
           "nn.LSTM/nn.GRU (the cell state carries the gradient additively); or shorten the sequence to the "
           "steps that hold the signal.")
    evidence = {"direction": "shrinks", "spectral_radius": rec.spectral_radius, "kind": rec.kind,
                "time_steps": reach.time_steps,
                "steps_reached": reach.steps_reached, "first_reached_step": reach.first_reached,
                "entry_step": reach.entry, "zero_steps": reach.zero_steps, "first_step_share": reach.first_share,
                "decay_per_step": reach.per_step, "loss_relative_drop": judged[0] if judged else None,
                "growth_first_over_last": _growth(rec.profile), "profile": list(thin(rec.profile))}
    return Finding("recurrent-instability", "LK105", severity, message, fix, rec.module,
                   op.op if op else rec.kind, source, None, evidence, cause)


def _verdict(reach: Reach, judged, config: AuditConfig) -> tuple[Severity, str]:
    """How much the unreached steps matter, from the loss: falling well, the model learns from
    the steps the gradient reaches (info); flat or barely falling, what it needs likely sits
    earlier (warning). Unjudged (the caller has kept only a radius far below 1): a warning."""
    if judged is None:
        return Severity.WARNING, " Too few steps were observed to tell from the loss whether the early steps matter."
    drop, start, end, steps = judged
    curve = f"{num(start)} → {num(end)} over {steps} steps"
    if drop >= config.reach_learning_drop:
        return Severity.INFO, (f" The loss falls {pct(drop)} ({curve}), so the model learns from the steps the "
                               "gradient reaches; a dependency further back cannot be learned.")
    how = "is flat" if drop < config.loss_flat_share else f"falls only {pct(drop)}"
    return Severity.WARNING, (f" The loss {how} ({curve}): what the labels depend on likely sits before step "
                              f"{reach.first_reached}, where the gradient does not reach.")


def _reach_text(rec: RecurrenceStats, name: str, reach: Reach, config: AuditConfig) -> str:
    last = reach.time_steps - 1
    entry = ("at the last time step (the loss reads the final state)" if reach.entry == last
             else f"at time step {reach.entry} of 0–{last}")
    per_step = f" (×{num(reach.per_step)} per step back, measured)" if reach.per_step else ""
    zeros = (f", and steps 0–{reach.zero_steps - 1} get exactly 0 (float32 underflow)"
             if reach.zero_steps else f" (step 0: {num(reach.first_share)})")
    jacobian = f"{rec.param}ᵀ·" + {"rnn_tanh": "diag(1 − h²)", "rnn_relu": "diag(relu′)"}.get(
        rec.kind, "diag(f′) (f′ = 1 − h² for tanh)")
    return (f"{name} has spectral radius ρ = {rec.spectral_radius:.3g}: backprop through time multiplies the "
            f"gradient by {jacobian} once per step back, so it shrinks like ρᵏ{per_step}. It enters {entry} "
            f"and reaches back only {reach.steps_reached} of the {reach.time_steps} time steps: steps "
            f"0–{reach.first_reached - 1} get less than {num(config.time_decay)} of it{zeros}.")


def _init_line(stats: AuditStats, rec: RecurrenceStats, name: str):
    """Where the recurrent weight got its values: the last nn.init call or in-place write to it,
    else where it was created (the layer's construction, or the nn.Parameter(...) line)."""
    if rec.init_source is not None:
        return rec.init_source
    return next((p.source for p in stats.params if p.name == name), None)


@explainer("LK105")
def _explains_large_updates(root: Finding, symptom: Finding) -> str | None:
    """A too-high update ratio (LK202) of a weight in the recurrence whose gradient grows
    over time: the update is lr·g, and g is what explodes (the rate as set is not the cause;
    clipping the gradient norm, the root's fix, bounds the update)."""
    if symptom.code != "LK202" or symptom.evidence.get("direction") != "high" \
            or root.evidence.get("direction") != "grows" or not root.module or not symptom.module:
        return None
    if symptom.module != root.module and not symptom.module.startswith(root.module + "."):
        return None
    growth = root.evidence.get("growth_first_over_last")
    grown = f" ({num(growth)}× from the last time step to the first)" if growth else ""
    return (f"its gradient grows through time in {root.module}'s recurrence{grown}, so lr·g is as large "
            "as the gradient is")


@headline("LK105", "gradient growth over time steps")
def _headline(finding: Finding, stats: AuditStats):
    rec = next((r for r in stats.recurrences if r.module == finding.module), None)
    if rec is None:
        return None
    if rec.profile and rec.profile[-1] > 0:
        return f"{num(rec.profile[0] / rec.profile[-1])}× (radius {rec.spectral_radius:.2f})"
    return f"radius {rec.spectral_radius:.2f}"
