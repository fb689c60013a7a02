"""LK204 loss-not-decreasing: the loss stays flat, and something measured says it is stuck.

Gradient descent lowers the loss by about lr * ||g||^2 per step for a small enough lr; a
flat loss means the gradient that reaches the parameters is ~0 or never applied, or the
steps are so small that the weights do not move. A flat stretch alone is not evidence: a
model that learns slowly at a modest learning rate is flat over 20 steps too. So the
finding is a warning only with evidence that something is stuck:

- a leak that explains it: dead units, a dead zone, a vanishing gradient (through depth or
  through time), stale parameters, a cut path, an update ratio far from the band (in
  either direction: a too high rate makes the loss hover as surely as a too low one keeps
  it still);
- or updates too small to move the loss: at first order a step changes the loss by at most
  Σ ||g||·||Δw|| over the optimizer's parameters (Cauchy-Schwarz), and over the observed
  steps that bound stays below `loss_stuck_share` of the drop that counts as learning,
  while the learning rate is not still warming up (rising 2× or more over those steps).

Without either it is worth knowing (info), with the numbers, and no advice about the
learning rate, whose direction nothing measured would support. Each optimizer's loss is
judged on its own (checks/_loss.py); the players of an adversarial game are not judged.
"""
from __future__ import annotations

import math
import statistics

from leaky.checks import explained_by, note, register
from leaky.checks._loss import (Objective, cause_text, causes, change_bound, curve_of, each_objective,
                                judged_within_periods, objectives, weights_of, whose, with_cause)
from leaky.checks._optim import lr_cause, lr_origin, optimizer_label
from leaky.checks._util import num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats

@register("LK204", "loss-not-decreasing", "a flat loss, with the leak that explains it", links=True,
          explained_by=("LK102", "LK106", "LK103", "LK105", "LK201", "LK108", "LK202", "LK101", "LK301", "LK304",
                        "LK305"))
def check(stats: AuditStats, config: AuditConfig, findings: list[Finding]) -> list[Finding]:
    return each_objective(stats, config, lambda objective: _with_cause(stats, objective, config, findings))


def _with_cause(stats: AuditStats, objective: Objective, config: AuditConfig, findings) -> Finding | None:
    """A flat loss explained by another finding changes where that one does; a stuck one
    (LK204 itself names the weight) at its learning rate's line. An info finding names none."""
    finding = _judge(stats, objective, config, findings)
    if finding is None or finding.severity is Severity.INFO:
        return finding
    return with_cause(finding, stats, objective, causes(findings, explained_by("LK204"), update_direction=None, recurrence_direction="shrinks"), "low", config)


def _judge(stats: AuditStats, objective: Objective, config: AuditConfig, findings) -> Finding | None:
    curve = curve_of(objective.rows, config.loss_min_steps)
    if curve is None or curve.nonfinite_step is not None or not math.isfinite(curve.start) or objective.competing:
        return None
    if curve.steps < config.loss_min_steps or abs(curve.start) < 1e-8:
        return None
    drop = (curve.start - curve.end) / abs(curve.start)
    if objective.moving_target:
        # NOTE: against a moving target the loss is comparable only within a period between
        # syncs; over the run its level follows the target's.
        drop = None if objective.resets_too_frequent(config) else objective.period_drop(config)
        if drop is None:
            return None
    if drop >= config.loss_flat_share or drop < -config.loss_rising_share:
        return None   # learning, or rising (LK205's business)
    found = causes(findings, explained_by("LK204"), update_direction=None, recurrence_direction="shrinks")
    change = f"{100 * drop:.1f}% lower" if drop >= 0 else f"{-100 * drop:.1f}% higher"
    short = f"short of the {100 * config.loss_flat_share:g}% drop that counts as learning."
    if objective.moving_target:
        flat = (f"the loss{whose(stats, objective)} does not fall between the syncs of its target: from the first "
                f"third of a period to its last it ends a median {change}, {short}")
    else:
        flat = (f"the loss{whose(stats, objective)} went from {num(curve.start)} (mean of the first steps) to "
                f"{num(curve.end)} (mean of the last) over {curve.steps} steps: {change}, {short}")
    evidence = {"loss_start": curve.start, "loss_end": curve.end, "relative_drop": drop, "steps": curve.steps,
                "explained_by": [f.code for f in found], "optimizer": objective.optimizer}
    if found:
        severity = Severity.ERROR if found[0].severity is Severity.ERROR else Severity.WARNING
        first = found[0]
        return Finding("loss-not-decreasing", "LK204", severity, flat + cause_text(found), first.fix,
                       first.module, first.op, first.source, curve.last_step, evidence)
    bound = change_bound(stats, objective)
    warmup = objective.warming_up(config)
    if bound is not None:
        evidence["loss_change_bound_per_step"] = bound
        reach = bound * curve.steps
        if warmup is None and reach < config.loss_stuck_share * config.loss_flat_share * abs(curve.start):
            return _stuck(stats, objective, bound, flat, curve, evidence, config)
    moved = (f" At first order its steps could change it by up to {num(bound)} each (Σ ||g||·||Δw||), so nothing "
             "leaky measured is stuck: this may be a slow start.") if bound is not None else ""
    if warmup is not None:
        evidence["lr_warmup"] = list(warmup)
        moved = (f" The learning rate is still rising (from {num(warmup[0])} to {num(warmup[1])} over these steps, "
                 "a warmup): small steps are by design, and a plateau is judged better after it.")
    fix = ("Observe more steps (--steps N) before judging a plateau; if it stays flat, check that the inputs "
           "and labels carry the signal (shuffled labels, a constant input).")
    return Finding("loss-not-decreasing", "LK204", Severity.INFO, flat + moved, fix, None, None, None,
                   curve.last_step, evidence)


def _stuck(stats: AuditStats, objective: Objective, bound: float, flat: str, curve, evidence,
           config: AuditConfig) -> Finding:
    """The updates are too small to move the loss: blame the weight that moves it most."""
    param = max(weights_of(stats, objective), key=lambda p: p.loss_change_bound or 0.0)
    source, origin = lr_origin(stats, param, "low", config)
    drop = config.loss_flat_share * abs(curve.start)
    message = (f"{flat} The updates are too small to move it: at first order one step changes the loss by at most "
               f"Σ ||g||·||Δw|| = {num(bound)}, {num(bound * curve.steps)} over the {curve.steps} steps, less than a "
               f"tenth of the {num(drop)} drop that counts as learning ({param.name} moves it most).{origin}")
    fix = "Raise the learning rate (×10 at a time) until ||Δw||/||w|| per step nears 1e-3."
    return Finding("loss-not-decreasing", "LK204", Severity.WARNING, message, fix, param.module, None, source,
                   curve.last_step, evidence, lr_cause(stats, param, "low", config))


@note("LK204")
def competing_objectives(stats: AuditStats, config: AuditConfig) -> list[str]:
    """Players of a game: each loss followed on its own, judged only for overflow (LK204, LK205)."""
    players = sorted({o.optimizer for o in objectives(stats, config) if o.competing and o.optimizer is not None
                      and o.optimizer < len(stats.optimizers)})
    if len(players) < 2:
        return []
    names = " and ".join(optimizer_label(stats, i) for i in players)
    return [f"{names} train competing objectives (the loss of one sends gradient into the other's parameters, as in "
            "a GAN or an actor-critic): each loss is followed on its own and judged only for overflow, since one "
            "may rise while the other falls (LK204, LK205)."]


@note("LK204")
def moving_target(stats: AuditStats, config: AuditConfig) -> list[str]:
    """A loss against a target that moves: judged within the periods between its changes, if any is long enough."""
    if not stats.target_syncs:
        return []
    syncs = sorted(set(stats.target_syncs))
    gaps = [b - a for a, b in zip(syncs, syncs[1:])]
    every = f"every ~{statistics.median(gaps):g} steps" if gaps else f"at step {syncs[0]}"
    judged = ("it is judged within the periods between changes" if _judged_within_periods(stats, config)
              else "no period between changes is long enough to judge the loss's trend")
    return [f"weights that no optimizer trains changed {every} (a target network synced from the trained one, or "
            f"an EMA copy): the loss is measured against a moving target, so {judged} (LK204, LK205)."]


@note("LK204")
def ranks_losses(stats: AuditStats, config: AuditConfig) -> list[str]:
    """Under torchrun every rank has its own loss: whose the judged curve is (LK204, LK205)."""
    ranks = stats.derived.get("loss_ranks") or {}
    if ranks.get("ranks", 1) < 2:
        return []
    if not ranks["alone"]:
        return [f"the loss curve is the mean of the {ranks['ranks']} ranks' losses (LK204, LK205)."]
    if not ranks["averaged"]:
        return [f"the loss curve is rank 0's alone, one of {ranks['ranks']} ranks: leaky found no process group "
                "to average the ranks' losses over (LK204, LK205)."]
    return [f"the loss curve is the mean of the {ranks['ranks']} ranks' losses for {ranks['averaged']} steps, and "
            f"rank 0's alone for the last {ranks['alone']}: the process group was gone when leaky read them "
            "(destroy_process_group() before the end of the run) (LK204, LK205)."]


def _judged_within_periods(stats: AuditStats, config: AuditConfig) -> bool:
    """As LK204 and LK205 decide it: per objective, over the target's syncs and that optimizer's
    learning-rate restarts (the syncs alone when no loss is followed outside a game)."""
    followed = [o for o in objectives(stats, config) if not o.competing]
    if not followed:
        return judged_within_periods(stats.target_syncs, config)
    return any(judged_within_periods(o.resets, config) for o in followed)
