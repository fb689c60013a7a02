"""LK205 loss-diverging: the loss rises, oscillates with growing amplitude, or overflows.

Gradient descent on a quadratic with curvature h is stable only for lr < 2/h: beyond it
each step overshoots and the error grows by |1 - lr*h| per step, which shows first as a
growing oscillation, then a rise, then inf/NaN. The finding names what drives it when one
was found: a large update ratio, an exploding gradient, or the non-finite origin.
"""
from __future__ import annotations

import math
import statistics

from leaky.checks import register
from leaky.checks._loss import cause_text, causes, loss_curve
from leaky.checks._util import num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats

# NOTE: in order of precedence. An update larger than the weight itself (LK202 error) is
# the mechanism of the divergence: the growing gradient (LK104) and the overflow where the
# first NaN appears (LK107) follow from it, so its line (the learning rate) goes first.
_EXPLAINS = ("LK202", "LK107", "LK104", "LK105", "LK203")
_GROWTH = 4.0     # oscillation: the spread of the last quarter over the first
_MIN_SWING = 0.01  # ... and the last quarter's swings must be at least 1% of the loss


@register("LK205", "loss-diverging", "a rising or oscillating loss that ends in overflow", links=True)
def check(stats: AuditStats, config: AuditConfig, findings: list[Finding]) -> list[Finding]:
    curve = loss_curve(stats, config.loss_min_steps)
    if curve is None:
        return []
    found = causes(findings, _EXPLAINS, update_direction="high")
    if curve.nonfinite_step is not None:
        message = f"the loss became non-finite at step {curve.nonfinite_step}.{cause_text(found)}"
        return [_finding(Severity.ERROR, message, found, curve.nonfinite_step,
                         {"nonfinite_step": curve.nonfinite_step})]
    if curve.steps < config.loss_min_steps or not math.isfinite(curve.start):
        return []
    if curve.start > 0 and curve.end > curve.start * config.loss_rise_factor:
        message = (f"the loss rose from {num(curve.start)} to {num(curve.end)} over {curve.steps} steps "
                   f"({num(curve.end / curve.start)}×).{cause_text(found)}")
        return [_finding(Severity.WARNING, message, found, curve.last_step,
                         {"loss_start": curve.start, "loss_end": curve.end})]
    growth = _oscillation(stats)
    if growth is not None and growth >= _GROWTH and curve.end >= curve.start:
        message = (f"the loss oscillates with growing amplitude: its step-to-step swings in the last quarter "
                   f"are {num(growth)}× those of the first.{cause_text(found)}")
        return [_finding(Severity.WARNING, message, found, curve.last_step, {"swing_growth": growth})]
    return []


def _oscillation(stats: AuditStats) -> float | None:
    losses = [loss for _, loss, _, _ in stats.series if loss is not None and math.isfinite(loss)]
    if len(losses) < 16:
        return None
    swings = [abs(b - a) for a, b in zip(losses, losses[1:])]
    quarter = len(swings) // 4
    first, last = statistics.median(swings[:quarter]), statistics.median(swings[-quarter:])
    level = statistics.mean(abs(v) for v in losses)
    # NOTE: growth of swings that stay within 1% of the loss is noise around a plateau.
    if first <= 0 or last < _MIN_SWING * level:
        return None
    return last / first


def _finding(severity, message, found, step, evidence) -> Finding:
    fix = (found[0].fix if found else
           "Lower the learning rate (×0.1), add warmup, and clip the gradient norm "
           "(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)).")
    evidence = {**evidence, "explained_by": [f.code for f in found]}
    first = found[0] if found else None
    return Finding("loss-diverging", "LK205", severity, message, fix, first.module if first else None,
                   first.op if first else None, first.source if first else None, step, evidence)
