"""LK105 recurrent-instability: a recurrence whose backward pass grows or dies over time.

Backprop through time applies the recurrent Jacobian once per step:

    dL/dh_{t-1} = W_hh^T diag(f'(a_t)) dL/dh_t

so after k steps the gradient scales roughly like rho(W_hh)^k, where rho is the spectral
radius (damped by f' <= 1). rho > 1 with a gradient that grows toward t = 0 explodes;
rho << 1 with a gradient that never reaches the early steps vanishes. Gated cells
(LSTM/GRU) route the gradient around W_hh through the cell state, so for them only a
measured explosion counts.
"""
from __future__ import annotations

import math

from leaky.checks import register
from leaky.checks._util import num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats, RecurrenceStats, thin

_FIX_EXPLODE = ("Clip the gradient norm after backward(): "
                "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); initialise the recurrent "
                "weight orthogonally (nn.init.orthogonal_, rho = 1), or use nn.LSTM/nn.GRU.")
_FIX_VANISH = ("Use nn.LSTM or nn.GRU (the cell state carries the gradient additively), initialise "
               "the recurrent weight with nn.init.orthogonal_ so rho = 1, or shorten the sequence.")


@register("LK105", "recurrent-instability", "a recurrence matrix with spectral radius far from 1, and its time profile")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    for rec in stats.recurrences:
        finding = _judge(rec, config)
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
    severity, fix, what = None, _FIX_EXPLODE, ""
    if growth is not None and growth >= config.time_growth and (rho > config.radius_high or rec.gated):
        severity, what = Severity.ERROR, "grows"
    elif growth is not None and growth >= math.sqrt(config.time_growth) and rho > config.radius_high \
            and not rec.gated:
        severity, what = Severity.WARNING, "grows"
    elif growth is not None and growth <= config.time_decay and rho < config.radius_low and not rec.gated:
        severity, what, fix = Severity.WARNING, "shrinks", _FIX_VANISH
    elif growth is None and rho > 2 * config.radius_high and not rec.gated:
        severity, what = Severity.WARNING, "cannot be measured per time step on this backend, but"
    if severity is None:
        return None
    steps = len(rec.profile) if rec.profile else 0
    ratio = num(growth) if growth else "< 1e-38"   # 0: underflowed in float32
    trend = (f"the gradient reaching time step 0 is {ratio}× the one at step {steps - 1}"
             if growth is not None else "the per-time-step profile is unavailable")
    message = (f"{rec.module}.{rec.param} has spectral radius ρ = {rho:.3g}; backprop through time "
               f"multiplies by W_hhᵀ·diag(f′) each step, so the gradient {what} over {steps} steps: "
               f"{trend}.")
    op = rec.op
    evidence = {"spectral_radius": rho, "kind": rec.kind, "time_steps": steps, "growth_first_over_last": growth,
                "profile": list(thin(rec.profile)) if rec.profile else None}
    return Finding("recurrent-instability", "LK105", severity, message, fix, rec.module,
                   op.op if op else rec.kind, op.source if op else None, None, evidence)
