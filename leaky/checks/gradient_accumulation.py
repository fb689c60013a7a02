"""LK203 gradient-accumulation: gradients are never zeroed between optimizer steps.

backward() adds into .grad: p.grad += dL/dp. Without optimizer.zero_grad() each step's
gradient is the sum of all earlier ones, g_t = sum_{k<=t} dL_k/dp, so the step size ramps
up with t and old batches keep steering. leaky checks, at the first backward of each
sampled step, whether .grad still holds a nonzero gradient from the step before.
Intentional accumulation (k backward calls, then step and zero) starts every optimizer
step from zero and is not a finding.
"""
from __future__ import annotations

from leaky.checks import register
from leaky.checks._util import num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats

_MIN_STEPS = 3


@register("LK203", "gradient-accumulation", "gradients are never zeroed between steps")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    if not stats.used_optimizer or stats.carry_checked < _MIN_STEPS or stats.carried_steps < stats.carry_checked:
        return []
    norms = [n for n in stats.grad_norms if n is not None]
    ramp = norms[-1] / norms[0] if len(norms) > 1 and norms[0] else None
    grown = f"; the total gradient norm went from {num(norms[0])} to {num(norms[-1])}" if ramp else ""
    message = (f"in all {stats.carry_checked} sampled steps the first backward() found the previous step's "
               f"gradients still in .grad, so backward() added to them (p.grad += ∂L/∂p) and every step "
               f"used the sum of all earlier gradients{grown}.")
    fix = ("Call optimizer.zero_grad() once per optimizer step (before backward, or right after step). "
           "To accumulate over k micro-batches on purpose, zero every k steps.")
    return [Finding("gradient-accumulation", "LK203", Severity.ERROR, message, fix, None, None, None, None,
                    {"steps_checked": stats.carry_checked, "steps_with_old_gradients": stats.carried_steps,
                     "grad_norm_ratio_last_first": ramp})]
