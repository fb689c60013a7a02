"""Run notes: what a report does not judge, and why, one plain line each.

A check that stays quiet because its premise does not hold (the update-ratio band for a
quasi-Newton step, a loss trend for an adversarial game) says so here, once, so that a
person can tell "leaky looked and found nothing" from "leaky did not judge this".
"""
from __future__ import annotations

from leaky.checks._loss import objectives
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
    every = f"every ~{sorted(gaps)[len(gaps) // 2]} steps" if gaps else f"at step {syncs[0]}"
    judged = ("it is judged within the periods between changes" if gaps and sorted(gaps)[len(gaps) // 2]
              >= config.loss_min_period else "no period between changes is long enough to judge the loss's trend")
    return [f"weights that no optimizer trains changed {every} (a target network synced from the trained one, or "
            f"an EMA copy): the loss is measured against a moving target, so {judged} (LK204, LK205)."]


NOTES = (unbanded_optimizers, competing_objectives, moving_target)


def run_notes(stats: AuditStats, config: AuditConfig | None = None) -> list[str]:
    """The notes for these stats, judged with `config` (the defaults when None)."""
    config = config or AuditConfig()
    return [note for make in NOTES for note in make(stats, config)]
