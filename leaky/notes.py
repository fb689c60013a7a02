"""Run notes: what a report does not judge, and why, one plain line each.

A check that stays quiet because its premise does not hold (the update-ratio band for a
quasi-Newton step, a loss trend for an adversarial game) says so here, once, so that a
person can tell "leaky looked and found nothing" from "leaky did not judge this".
"""
from __future__ import annotations

import statistics

from leaky.checks._loss import judged_within_periods, objectives
from leaky.config import AuditConfig
from leaky.numbers import line_of
from leaky.optimizers import rule_of
from leaky.stats import AuditStats


def _optimizer_name(stats: AuditStats, index: int) -> str:
    optimizer = stats.optimizers[index]
    where = f" ({line_of(optimizer.source)})" if optimizer.source else ""
    return f"{optimizer.kind}{where}"


def unbanded_optimizers(stats: AuditStats, config: AuditConfig) -> list[str]:
    notes = []
    for optimizer in stats.optimizers:
        rule = rule_of(optimizer)
        if not rule.banded:
            notes.append(f"{_optimizer_name(stats, optimizer.index)} takes {rule.update}: one step is not one "
                         "gradient step scaled by lr, so its updates are not judged against the update-ratio band "
                         "(LK202).")
    return notes


def competing_objectives(stats: AuditStats, config: AuditConfig) -> list[str]:
    players = sorted({o.optimizer for o in objectives(stats, config) if o.competing and o.optimizer is not None
                      and o.optimizer < len(stats.optimizers)})
    if len(players) < 2:
        return []
    names = " and ".join(_optimizer_name(stats, i) for i in players)
    return [f"{names} train competing objectives (the loss of one sends gradient into the other's parameters, as in "
            "a GAN or an actor-critic): each loss is followed on its own and judged only for overflow, since one "
            "may rise while the other falls (LK204, LK205)."]


def moving_target(stats: AuditStats, config: AuditConfig) -> list[str]:
    if not stats.target_syncs:
        return []
    syncs = sorted(set(stats.target_syncs))
    gaps = [b - a for a, b in zip(syncs, syncs[1:])]
    every = f"every ~{statistics.median(gaps):g} steps" if gaps else f"at step {syncs[0]}"
    judged = ("it is judged within the periods between changes" if _judged_within_periods(stats, config)
              else "no period between changes is long enough to judge the loss's trend")
    return [f"weights that no optimizer trains changed {every} (a target network synced from the trained one, or "
            f"an EMA copy): the loss is measured against a moving target, so {judged} (LK204, LK205)."]


def _judged_within_periods(stats: AuditStats, config: AuditConfig) -> bool:
    """As LK204 and LK205 decide it: per objective, over the target's syncs and that optimizer's
    learning-rate restarts (the syncs alone when no loss is followed outside a game)."""
    followed = [o for o in objectives(stats, config) if not o.competing]
    if not followed:
        return judged_within_periods(stats.target_syncs, config)
    return any(judged_within_periods(o.resets, config) for o in followed)


NOTES = (unbanded_optimizers, competing_objectives, moving_target)


def run_notes(stats: AuditStats, config: AuditConfig | None = None) -> list[str]:
    """The notes for these stats, judged with `config` (the defaults when None)."""
    config = config or AuditConfig()
    return [note for make in NOTES for note in make(stats, config)]
