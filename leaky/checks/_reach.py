"""How far back in time a recurrence's gradient reaches (LK105's vanishing side).

For h_t = tanh(W h_{t-1} + U x_t + b), the gradient that enters at time step e (where the
loss reads the state) reaches step t through the product of e - t Jacobians:

    dL/dh_t = [prod_{s=t+1..e} W^T diag(1 - h_s^2)] dL/dh_e

so its size falls like rho(W)^(e-t) (Gelfand: ||W^k||^(1/k) -> rho(W)), times the tanh
factors 1 - h_s^2 <= 1. A step that gets less than `time_decay` of the entering gradient
is not reached: what the model sees there moves the weights by less than `time_decay` of
what it sees at the entry. In float32 the measured norm reads exactly 0 before the
gradient itself does: its squares leave the normal range below ~1e-19 per element and
round to 0 below ~1e-23.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from leaky.checks._loss import curve_of, objectives
from leaky.config import AuditConfig
from leaky.stats import AuditStats, RecurrenceStats


@dataclass(frozen=True)
class Reach:
    """A per-time-step gradient profile, read from where the gradient enters back to t = 0."""

    time_steps: int
    entry: int               # the time step with the largest gradient: where the loss reads the state
    first_reached: int       # earliest step from which every step up to `entry` gets >= time_decay of it
    zero_steps: int          # leading steps whose gradient is exactly 0 (underflowed)
    first_share: float       # the gradient at step 0 over the one at `entry`
    per_step: float | None   # the measured factor per step back (geometric mean over the nonzero span)

    @property
    def steps_reached(self) -> int:
        return self.time_steps - self.first_reached


def reach_of(profile: tuple[float, ...] | None, decay: float) -> Reach | None:
    """The reach of a profile (t = 0 first); None when it is too short or not finite."""
    if not profile or len(profile) < 2 or not all(math.isfinite(v) for v in profile):
        return None
    entry = max(range(len(profile)), key=lambda t: profile[t])
    peak = profile[entry]
    if peak <= 0:
        return None
    first = entry
    while first > 0 and profile[first - 1] >= decay * peak:
        first -= 1
    zeros = next((t for t, v in enumerate(profile) if v > 0), len(profile))
    span = entry - zeros
    per_step = (profile[zeros] / peak) ** (1 / span) if span > 0 else None
    return Reach(len(profile), entry, first, zeros, profile[0] / peak, per_step)


def contracting(rec: RecurrenceStats, reach: Reach, config: AuditConfig) -> bool:
    """W itself shrinks the gradient below `time_decay` between the entry and step 0: rho is
    far below 1 (`radius_low`), or rho^(entry) <= time_decay. With rho ~ 1 (an orthogonal W)
    any decay comes from the tanh factors (saturation, LK101), not from W's scale."""
    rho = rec.spectral_radius
    if not math.isfinite(rho) or rho >= 1:
        return False
    return rho < config.radius_low or rho ** reach.entry <= config.time_decay


def loss_drop(stats: AuditStats, rec: RecurrenceStats, config: AuditConfig) -> tuple[float, float, float, int] | None:
    """(relative drop, start, end, steps) of the loss that trains the recurrent weight, the way
    LK204 reads it (the first and last tenth); None when there are too few steps to judge, the
    loss is not finite, or it is one player of a game or measured against a moving target."""
    name = f"{rec.module}.{rec.param}" if rec.module else rec.param
    holder = next((p.optimizer for p in stats.params if p.name == name), None)
    judged = [o for o in objectives(stats, config) if not o.competing and not o.moving_target]
    mine = [o for o in judged if o.optimizer == holder] or (judged if len(judged) == 1 else [])
    if not mine:
        return None
    curve = curve_of(mine[0].rows, config.loss_min_steps)
    if curve is None or curve.nonfinite_step is not None or curve.steps < config.loss_min_steps:
        return None
    if not math.isfinite(curve.start) or abs(curve.start) < 1e-8:
        return None
    return (curve.start - curve.end) / abs(curve.start), curve.start, curve.end, curve.steps
