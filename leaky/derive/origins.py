"""What `record/origins.py` saw, as frozen stats: per optimizer that stepped, where
it was built, stepped and zeroed, its scheduler and its learning rates; and the
low-precision casts."""
from __future__ import annotations

from leaky.stats import CastStats, OptimizerStats, SchedulerStats, _source


def optimizer_stats_of(origins, optimizers: list) -> tuple[OptimizerStats, ...]:
    """One record per optimizer, in the order of their first step (their index)."""
    result = []
    for index, optimizer in enumerate(optimizers):
        origin = origins.optimizer(optimizer)
        ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
        zeroing = tuple(dict.fromkeys(_source(w) for w in origins.zero_grad_sites(optimizer, ids)))
        sched = origins.scheduler_of(optimizer)
        scheduler = None if sched is None else SchedulerStats(sched.kind, _source(sched.where),
                                                               _source(sched.function_at))
        lr_range = tuple(origin.lr_range.get(g) for g in range(len(optimizer.param_groups)))
        result.append(OptimizerStats(index, origin.kind, _source(origin.where), _source(origin.step_at), zeroing,
                                     origin.cleared_steps, _source(origin.cleared_at), origin.lrs, lr_range,
                                     scheduler, origin.closure_calls))
    return tuple(result)


def cast_stats_of(origins) -> tuple[CastStats, ...]:
    return tuple(CastStats(c.kind, c.dtype, _source(c.where), c.target) for c in origins.casts.values())
