"""LK204 loss-not-decreasing: the loss stays flat over the observed steps.

Gradient descent lowers the loss by about lr * ||g||^2 per step for a small enough lr; a
flat loss means the gradient that reaches the parameters is ~0 or never applied. So the
finding names the leak that explains it when one was found: dead units, a dead zone, a
vanishing gradient, stale parameters, a cut path, or a tiny update ratio. The first and
last tenth of the observed losses are compared (means, so minibatch noise averages out).
"""
from __future__ import annotations

import math

from leaky.checks import register
from leaky.checks._loss import cause_text, causes, loss_curve
from leaky.checks._util import num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats

_RISE = 0.1   # a loss more than 10% higher at the end is rising, not flat
_EXPLAINS = ("LK102", "LK106", "LK103", "LK201", "LK108", "LK202", "LK101", "LK301", "LK304", "LK305")


@register("LK204", "loss-not-decreasing", "a flat loss, with the leak that explains it", links=True)
def check(stats: AuditStats, config: AuditConfig, findings: list[Finding]) -> list[Finding]:
    curve = loss_curve(stats, config.loss_min_steps)
    if curve is None or curve.nonfinite_step is not None or not math.isfinite(curve.start):
        return []
    if curve.steps < config.loss_min_steps or abs(curve.start) < 1e-8:
        return []
    drop = (curve.start - curve.end) / abs(curve.start)
    if drop >= config.loss_flat_share or drop < -_RISE:
        return []   # learning, or rising (LK205's business)
    found = causes(findings, _EXPLAINS, update_direction="low")
    change = f"{100 * drop:.1f}% lower" if drop >= 0 else f"{-100 * drop:.1f}% higher"
    message = (f"the loss went from {num(curve.start)} (mean of the first steps) to {num(curve.end)} (mean of "
               f"the last) over {curve.steps} steps: {change}, short of the "
               f"{100 * config.loss_flat_share:g}% drop that counts as learning.{cause_text(found)}")
    fix = (found[0].fix if found else
           "Check that the gradient reaches the parameters (leaky explain vanishing-gradient) and that the "
           "optimizer applies it (learning rate, param groups); try a 10× larger learning rate.")
    severity = Severity.ERROR if found and found[0].severity is Severity.ERROR else Severity.WARNING
    evidence = {"loss_start": curve.start, "loss_end": curve.end, "relative_drop": drop, "steps": curve.steps,
                "explained_by": [f.code for f in found]}
    first = found[0] if found else None
    return [Finding("loss-not-decreasing", "LK204", severity, message, fix,
                    first.module if first else None, first.op if first else None,
                    first.source if first else None, curve.last_step, evidence)]
