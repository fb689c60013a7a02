"""Where a training-dynamics fix goes: the line that set a parameter's learning rate.

An optimizer's update is w <- w - lr_t * step(g). lr_t is the rate given where the
optimizer was constructed, times whatever a scheduler made of it. So the line to change is
the scheduler's (its lr function, for LambdaLR and its kin) when the scheduler moved the
rate away from the constructed one during the observed steps, and the optimizer's
construction otherwise.
"""
from __future__ import annotations

from leaky.checks._util import line_of, num
from leaky.config import AuditConfig
from leaky.finding import Cause, Source
from leaky.stats import AuditStats, OptimizerStats, ParamStats


def optimizer_label(stats: AuditStats, index: int) -> str:
    """An optimizer as a note names it: its class and where it was built."""
    optimizer = stats.optimizers[index]
    where = f" ({line_of(optimizer.source)})" if optimizer.source else ""
    return f"{optimizer.kind}{where}"


def optimizer_of(stats: AuditStats, param: ParamStats) -> OptimizerStats | None:
    if param.optimizer is None or param.optimizer >= len(stats.optimizers):
        return None
    return stats.optimizers[param.optimizer]


def cleared_before_step(stats: AuditStats, param: ParamStats) -> bool:
    """A zero_grad() that clears this parameter's optimizer ran between backward() and
    step(), and the parameter had no gradient when its optimizer stepped (LK201, not LK108)."""
    optimizer = optimizer_of(stats, param)
    return optimizer is not None and optimizer.cleared_steps > 0 and not param.grad_norm


def group_lrs(optimizer: OptimizerStats, group: int | None) -> tuple[float | None, tuple[float, float] | None]:
    """(the lr as constructed, (lowest, highest) lr over the sampled steps) of one param group."""
    if group is None:
        return None, None
    initial = optimizer.initial_lrs[group] if group < len(optimizer.initial_lrs) else None
    seen = optimizer.lr_range[group] if group < len(optimizer.lr_range) else None
    return initial, seen


def lr_origin(stats: AuditStats, param: ParamStats, direction: str, config: AuditConfig,
              scheduler_only: bool = False) -> tuple[Source | None, str]:
    """Where the rate that made this parameter's update too large ("high"), too small
    ("low") or zero ("zero") came from, and a sentence saying so. With scheduler_only,
    only a scheduler that moved the rate counts (else: no source)."""
    optimizer = optimizer_of(stats, param)
    if optimizer is None:
        return None, ""
    initial, seen = group_lrs(optimizer, param.group)
    scheduler = optimizer.scheduler
    if (scheduler is not None and seen is not None and initial is not None
            and _moved(initial, seen, direction, config)):
        low, high = seen
        rate = num(high) if direction == "high" else num(low)
        where = scheduler.function_source or scheduler.source
        via = f" through its lr function ({line_of(scheduler.function_source)})" if scheduler.function_source else ""
        built = f" ({line_of(optimizer.source)})" if optimizer.source else ""
        scheduled = f" ({line_of(scheduler.source)})" if scheduler.source else ""
        return where, (f" The learning rate was {num(initial)} where {optimizer.kind} was built{built}; "
                       f"{scheduler.kind}{scheduled} made it {rate}{via}.")
    if optimizer.source is None or scheduler_only:
        return None, ""
    rate = f"{num(initial)} " if initial is not None else ""
    built = line_of(optimizer.source)
    return optimizer.source, f" The learning rate {rate}is set where {optimizer.kind} is built ({built})."


def lr_cause(stats: AuditStats, param: ParamStats, direction: str, config: AuditConfig,
             scheduler_only: bool = False) -> Cause | None:
    """`lr_origin`'s line as a finding's cause: the learning rate's line, saying what rate stands
    there ("the learning rate 0.5 set here", or what the scheduler made of it)."""
    optimizer = optimizer_of(stats, param)
    source, _ = lr_origin(stats, param, direction, config, scheduler_only)
    if optimizer is None or source is None:
        return None
    initial, seen = group_lrs(optimizer, param.group)
    if optimizer.scheduler is not None and source in (optimizer.scheduler.source, optimizer.scheduler.function_source):
        rate = seen[1] if direction == "high" else seen[0]
        return Cause.at(source, f"{optimizer.scheduler.kind} made the learning rate {num(rate)} here")
    rate = f" {num(initial)}" if initial is not None else ""
    return Cause.at(source, f"the learning rate{rate} of {optimizer.kind} set here")


def _moved(initial: float, seen: tuple[float, float], direction: str, config: AuditConfig) -> bool:
    """The scheduler moved the rate `scheduler_moved` (2×) or more in that direction."""
    low, high = seen
    if direction == "high":
        return high > config.scheduler_moved * initial
    if direction == "zero":
        return high == 0 and initial != 0
    return low * config.scheduler_moved < initial


def lrs_in_force(stats: AuditStats, param: ParamStats) -> dict[int, float]:
    """The learning rate of this parameter's group at each step of its optimizer's every-step
    series. The series keeps the first group's rate; a scheduler scales each group by the same
    factor (StepLR, ExponentialLR, cosine to 0, one lr function), so another group's rate is
    that times its share of the constructed rates."""
    optimizer = optimizer_of(stats, param)
    if optimizer is None or param.group is None or not optimizer.initial_lrs:
        return {}
    initial, first = group_lrs(optimizer, param.group)[0], optimizer.initial_lrs[0]
    scale = 1.0 if param.group == 0 else (initial / first if initial and first else None)
    if scale is None:
        return {}
    return {row.step: row.lr * scale for row in stats.series
            if row.optimizer == param.optimizer and row.lr is not None}


def stepped_every_batch(stats: AuditStats, optimizer: OptimizerStats) -> bool:
    """Its scheduler's step() ran about as often as the optimizer's own step (at least every
    other one): the schedule advances per batch, whatever its step counts were meant in."""
    scheduler = optimizer.scheduler
    steps = sum(1 for row in stats.series if row.optimizer == optimizer.index)
    return scheduler is not None and steps > 0 and 2 * scheduler.step_calls >= steps
