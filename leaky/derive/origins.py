"""What `record/origins.py` saw, as frozen stats: per optimizer that stepped, where
it was built, stepped and zeroed, its scheduler and its learning rates; and the
low-precision casts."""
from __future__ import annotations

import linecache
import re

from leaky.stats import CastStats, OptimizerStats, SchedulerStats, UnsteppedOptimizer, _source

_ASSIGNED = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?::[^=]+)?=[^=]")


def optimizer_stats_of(origins, optimizers: list) -> tuple[OptimizerStats, ...]:
    """One record per optimizer, in the order of their first step (their index)."""
    result = []
    for index, optimizer in enumerate(optimizers):
        origin = origins.optimizer(optimizer)
        ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
        zeroing = tuple(dict.fromkeys(_source(w) for w in origins.zero_grad_sites(optimizer, ids)))
        sched = origins.scheduler_of(optimizer)
        scheduler = None if sched is None else SchedulerStats(sched.kind, _source(sched.where),
                                                               _source(sched.function_at), _source(sched.step_at),
                                                               sched.step_calls)
        lr_range = tuple(origin.lr_range.get(g) for g in range(len(optimizer.param_groups)))
        result.append(OptimizerStats(index, origin.kind, _source(origin.where), _source(origin.step_at), zeroing,
                                     origin.cleared_steps, _source(origin.cleared_at), origin.lrs, lr_range,
                                     scheduler, origin.closure_calls, assigned_name(origin.where)))
    return tuple(result)


def unstepped_optimizers(origins, stepped: list, names: dict[int, str]) -> tuple[UnsteppedOptimizer, ...]:
    """The optimizers built during the run, still alive, that never stepped, with the trained
    parameters they hold (`names`: parameter id -> its ParamStats name, for the parameters
    that got a gradient and that no optimizer that stepped holds)."""
    ran = {id(optimizer) for optimizer in stepped}
    result = []
    for ref, origin in list(origins.optimizers.values()):
        optimizer = ref()
        if optimizer is None or id(optimizer) in ran:
            continue
        held = tuple(names[id(p)] for group in optimizer.param_groups for p in group["params"] if id(p) in names)
        if held:
            result.append(UnsteppedOptimizer(origin.kind, _source(origin.where), assigned_name(origin.where), held))
    return tuple(result)


def assigned_name(where: tuple | None) -> str | None:
    """The variable a line assigns to (`decoder_optimizer = optim.SGD(...)`), to name an
    object as the script does; None when the line is no plain assignment."""
    if not where or not where[0]:
        return None
    found = _ASSIGNED.match(linecache.getline(where[0], where[1]))
    return found.group(1) if found else None


def cast_stats_of(origins) -> tuple[CastStats, ...]:
    return tuple(CastStats(c.kind, c.dtype, _source(c.where), c.target) for c in origins.casts.values())
