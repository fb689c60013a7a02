"""LK205 loss-diverging: the loss rises, oscillates with growing amplitude, or overflows.

Gradient descent on a quadratic with curvature h is stable only for lr < 2/h: beyond it
each step overshoots and the error grows by |1 - lr*h| per step, which shows first as a
growing oscillation, then a rise, then inf/NaN. The finding names what drives it when one
was found: a large update ratio, an exploding gradient, or the non-finite origin.

Each optimizer's loss is judged on its own (checks/_loss.py). An overflow is always an
error. A rise or a growing oscillation is judged only where the objective holds still:
not for players of an adversarial game, whose losses trade off, and, under a moving target
(a synced target network), only within the periods between syncs.

A trust-region policy objective (PPO's clipped surrogate: a clamp set against its own
unclipped self on the loss path, record/clipping.py) does not hold still either: each
rollout brings new data from the policy being trained, with advantages and returns
estimated afresh, and the value loss's targets, the returns, grow as the agent improves.
Its loss rising is then no evidence of harm (CleanRL's PPO on CartPole: the loss 20.8 →
34.9 while the mean episode return went 25.5 → 61.1; lr × 0.1 halved the rise and stopped
the learning), so a rise or a swing of such a loss is said as info, an overflow still an error.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import replace

from leaky.checks import explained_by, register
from leaky.checks._loss import Objective, cause_text, causes, curve_of, each_objective, whose, with_cause
from leaky.checks._util import num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats

# NOTE: in order of precedence. An update larger than the weight itself (LK202 error) is
# the mechanism of the divergence: the growing gradient (LK104) and the overflow where the
# first NaN appears (LK107) follow from it, so its line (the learning rate) goes first.
@register("LK205", "loss-diverging", "a rising or oscillating loss that ends in overflow", links=True,
          explained_by=("LK202", "LK107", "LK104", "LK105", "LK203"))
def check(stats: AuditStats, config: AuditConfig, findings: list[Finding]) -> list[Finding]:
    found = causes(findings, explained_by("LK205"), update_direction="high", recurrence_direction="grows")
    region = _trust_region(stats)
    return each_objective(stats, config, lambda objective: _on_policy(with_cause(
        _judge(stats, objective, config, found), stats, objective, found, "high", config), region))


def _trust_region(stats: AuditStats):
    """The max/min op that sets a clamp against its own unclipped self on the loss path
    (PPO's clipped surrogate, record/clipping.py), or None."""
    return next((op for op in stats.ops if op.detail.get("clips")), None)


def _on_policy(finding: Finding | None, region) -> Finding | None:
    """A rise or swing of a trust-region policy objective's loss: info (see the module doc)."""
    if finding is None or region is None or "nonfinite_step" in finding.evidence or \
            finding.evidence.get("explained_by") or finding.severity is Severity.INFO:
        return finding   # NOTE: a mechanism measured (an update larger than its weight, a growing gradient) stays
    where = f" at {region.source.file.rsplit('/', 1)[-1]}:{region.source.line}" if region.source else ""
    message = (finding.message + f" The loss is a trust-region policy objective (a clipped surrogate{where}): each "
               "rollout brings new data from the policy being trained, and its returns, the value loss's targets, "
               "grow as the policy improves, so its level rising is no evidence of harm. Judge the run by its "
               "returns.")
    fix = ("Nothing to fix if the returns are rising. If they are not, lower the learning rate or the number of "
           "update epochs per rollout.")
    return replace(finding, severity=Severity.INFO, message=message, fix=fix, cause=None,
                   evidence={**finding.evidence, "on_policy": True})


def _weights_first(stats: AuditStats, curve) -> str:
    """What a watch saw at an unsampled step whose loss was NaN/Inf (record/replay.py): the
    weights were already non-finite, so that step's forward only read the NaN."""
    at = stats.weights_nonfinite_at
    if at is None or at != curve.nonfinite_step:
        return ""
    return (f" The weights were already non-finite when step {at}'s forward ran: the NaN came from an earlier "
            "backward or update, not from that forward.")


def _judge(stats: AuditStats, objective: Objective, config: AuditConfig, found: list[Finding]) -> Finding | None:
    curve = curve_of(objective.rows, config.loss_min_steps)
    if curve is None:
        return None
    of = whose(stats, objective)
    if curve.nonfinite_step is not None:
        message = f"the loss{of} became non-finite at step {curve.nonfinite_step}.{_weights_first(stats, curve)}" \
                  f"{cause_text(found)}"
        evidence = {"nonfinite_step": curve.nonfinite_step, "optimizer": objective.optimizer}
        if stats.weights_nonfinite_at is not None:
            evidence["weights_nonfinite_at"] = stats.weights_nonfinite_at
        return _finding(Severity.ERROR, message, found, curve.nonfinite_step, evidence)
    if objective.competing or curve.steps < config.loss_min_steps or not math.isfinite(curve.start):
        return None
    summed = objective.per_term()
    if summed is not None:
        # NOTE: a sum over a varying number of terms (an episode's): its rise is judged per term
        rows, fewest, most = summed
        objective = replace(objective, rows=rows)
        curve = curve_of(rows, config.loss_min_steps)
        of += f" per summed term (it adds up {fewest} to {most} terms, a different number at each step)"
    if objective.moving_target:
        if objective.resets_too_frequent(config):
            return None
        return _rise_within_periods(objective, objective.periods(), config, found, of)
    if curve.start > 0 and curve.end > curve.start * config.loss_rise_factor \
            and _beyond_noise(objective.rows, config):
        message = (f"the loss{of} rose from {num(curve.start)} to {num(curve.end)} over {curve.steps} steps "
                   f"({num(curve.end / curve.start)}×).{cause_text(found)}")
        return _finding(Severity.WARNING, message, found, curve.last_step,
                        {"loss_start": curve.start, "loss_end": curve.end, "optimizer": objective.optimizer})
    # NOTE: not while the rate warms up (it rose lr_jump× or more over the rows): the first
    # quarter's steps were small by design, so the swings of the last are no like for like;
    # a warmup into a rate too high shows as a rise or an overflow (the rules above)
    growth = _oscillation(objective.periods(), config) if objective.warming_up(config) is None else None
    if growth is not None and growth >= config.loss_swing_growth and curve.end >= curve.start:
        message = (f"the loss{of} oscillates with growing amplitude: its step-to-step swings in the last quarter "
                   f"are {num(growth)}× those of the first, relative to the loss.{cause_text(found)}")
        return _finding(Severity.WARNING, message, found, curve.last_step,
                        {"swing_growth": growth, "optimizer": objective.optimizer})
    return None


def _beyond_noise(rows, config: AuditConfig) -> bool:
    """Whether the rise from the first tenth to the last is a trend and not the series'
    own step-to-step spread (see AuditConfig.loss_rise_noise_z).

    NOTE: on the log of the loss when it is positive: a divergence grows geometrically
    (|1 - lr·h| per step), and a loss that climbed five orders of magnitude and swings by
    one at the top has swings huge in absolute terms but small next to its rise."""
    losses = [loss for _, loss in rows if math.isfinite(loss)]
    if len(losses) < 6:
        return True
    if min(losses) > 0:
        losses = [math.log(loss) for loss in losses]
    k = max(3, len(losses) // 10)   # the window curve_of averages
    start, end = statistics.fmean(losses[:k]), statistics.fmean(losses[-k:])
    sigma = math.sqrt(statistics.fmean((b - a) ** 2 for a, b in zip(losses, losses[1:])) / 2)
    return end - start > config.loss_rise_noise_z * sigma * math.sqrt(2 / k)


def _rise_within_periods(objective: Objective, periods, config: AuditConfig, found, of: str) -> Finding | None:
    """Under a moving target: does the loss rise between resets, where the target holds still?"""
    rises = []
    for period in periods:
        losses = [loss for _, loss in period if math.isfinite(loss)]
        if len(losses) < 6:
            continue
        third = len(losses) // 3
        start, end = statistics.mean(losses[:third]), statistics.mean(losses[-third:])
        if start > 0:
            rises.append(end / start)
    if len(rises) < config.loss_min_periods or statistics.median(rises) <= config.loss_rise_factor:
        return None
    typical = statistics.median(rises)
    message = (f"the loss{of} rises within the periods between resets of its target (a target network "
               f"synced, or the learning rate restarted): a median {num(typical)}× from the start of a period "
               f"to its end, over {len(rises)} periods.{cause_text(found)}")
    return _finding(Severity.WARNING, message, found, objective.rows[-1][0],
                    {"rise_within_periods": typical, "periods": len(rises), "optimizer": objective.optimizer})


def _oscillation(periods: list[list[tuple[int, float]]], config: AuditConfig) -> float | None:
    """Growth of the step-to-step swings relative to the loss's level, last quarter over
    first; swings across a reset (a learning-rate restart) are left out.

    NOTE: relative, so that a loss whose scale grows (values bootstrapped from a growing
    value function, say) is not read as an oscillation: its swings grow with it."""
    swings = []
    for period in periods:
        losses = [loss for _, loss in period if math.isfinite(loss)]
        swings.extend(abs(b - a) / max((abs(a) + abs(b)) / 2, 1e-30) for a, b in zip(losses, losses[1:]))
    if len(swings) < 15:
        return None
    quarter = len(swings) // 4
    first, last = statistics.median(swings[:quarter]), statistics.median(swings[-quarter:])
    # NOTE: growth of swings that stay within 1% of the loss is noise around a plateau.
    if first <= 0 or last < config.loss_min_swing:
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
