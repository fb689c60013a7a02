"""LK203 gradient-accumulation: gradients are never zeroed between optimizer steps.

backward() adds into .grad: p.grad += dL/dp. Without optimizer.zero_grad() each step's
gradient is the sum of all earlier ones, g_t = sum_{k<=t} dL_k/dp, so the step size ramps
up with t and old batches keep steering. leaky checks, at the first backward of each
sampled step, whether .grad still holds a nonzero gradient from the step before.
Intentional accumulation (k backward calls, then step and zero) starts every optimizer
step from zero and is not a finding. The finding points at the optimizer's zero_grad()
call when it has one (it runs, but not once per step), else at its step() call.
"""
from __future__ import annotations

from leaky.checks import register
from leaky.checks._util import line_of, listed, num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats


@register("LK203", "gradient-accumulation", "gradients are never zeroed between steps")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    if not stats.used_optimizer:
        return []
    findings = []
    for index, checked in sorted(stats.carry_checked.items()):
        carried = stats.carried_steps.get(index, 0)
        if checked >= config.accumulation_min_steps and carried == checked:
            findings.append(_finding(stats, index, checked))
    return findings


def _finding(stats: AuditStats, index: int, checked: int) -> Finding:
    modules = stats.optimizer_modules.get(index, [])
    which = f"optimizer #{index + 1}" + (f" (over {listed(modules, 4)})" if modules else "")
    norms = [n for n in stats.grad_norms if n is not None]
    ramp = norms[-1] / norms[0] if len(norms) > 1 and norms[0] else None
    grown = f"; the total gradient norm went from {num(norms[0])} to {num(norms[-1])}" if ramp else ""
    message = (f"for {which}, in all {checked} sampled steps every backward() started from the previous "
               f"step's gradients still in .grad, so backward() added to them (p.grad += ∂L/∂p) and each step "
               f"used the sum of all earlier gradients{grown}.")
    source, where = None, ""
    if index < len(stats.optimizers):
        optimizer = stats.optimizers[index]
        if optimizer.zero_grad_sources:
            source = optimizer.zero_grad_sources[0]
            where = (f" The zero_grad() at {line_of(source)} clears them, but it does not run before every step()"
                     + (f" ({line_of(optimizer.step_source)})." if optimizer.step_source else "."))
        elif optimizer.step_source is not None:
            source = optimizer.step_source
            where = f" No zero_grad() clears them before the step at {line_of(source)}."
    fix = ("Call this optimizer's zero_grad() once per optimizer step (before backward, or right after step). "
           "To accumulate over k micro-batches on purpose, zero every k steps.")
    return Finding("gradient-accumulation", "LK203", Severity.ERROR, message + where, fix,
                   modules[0] if len(modules) == 1 else None, None, source, None,
                   {"optimizer": index, "modules": modules, "steps_checked": checked,
                    "grad_norm_ratio_last_first": ramp})
