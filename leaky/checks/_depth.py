"""The gradient's path from the loss to the input, per parameterised module.

Both LK103 and LK104 read it. For each module that owns trainable parameters and whose
ops ran backward, the gradient entering the module is the norm arriving at its last op
in forward order. The ratio earliest / latest says how much of the signal that leaves the
loss end reaches the input end; the per-op gains between them say where it went.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from leaky.config import AuditConfig
from leaky.stats import AuditStats, OpStats


@dataclass(frozen=True)
class DepthProfile:
    earliest: OpStats          # entry op of the earliest parameterised module
    latest: OpStats            # entry op of the latest one
    ratio: float               # earliest.grad_in / latest.grad_in
    path: tuple[OpStats, ...]  # ops between them (forward order) that have a gain
    modules: int


def depth_profile(stats: AuditStats) -> DepthProfile | None:
    """From the per-module table: the modules that own a trainable parameter that got a
    gradient, outside recurrences, each entered at its latest op with a measured gradient."""
    rows = [row for row in stats.module_table if row.trainable and not row.recurrent and row.entry_site is not None]
    if len(rows) < 2:
        return None
    order = sorted(rows, key=lambda row: row.start)
    earliest, latest = stats.op(order[0].entry_site), stats.op(order[-1].entry_site)
    if not latest.grad_in or not math.isfinite(latest.grad_in) or not math.isfinite(earliest.grad_in):
        return None
    path = tuple(op for op in stats.ops
                 if op.gain is not None and earliest.first_seq <= op.first_seq <= latest.first_seq
                 and op.steps > 0)
    return DepthProfile(earliest, latest, earliest.grad_in / latest.grad_in, path, len(rows))


def worst_ops(path: tuple[OpStats, ...], shrinking: bool, config: AuditConfig, limit: int = 3) -> list[OpStats]:
    """The ops whose gain moved the signal most in the given direction (at most `limit`, for
    the message: the first is where the finding points)."""
    if shrinking:
        chosen = sorted((op for op in path if op.gain < config.culprit_shrink_gain), key=lambda op: op.gain)
    else:
        chosen = sorted((op for op in path if op.gain > config.culprit_grow_gain), key=lambda op: -op.gain)
    return chosen[:limit]


def describe(op: OpStats) -> str:
    place = op.module or "<script>"
    line = f" line {op.source.line}" if op.source else ""
    return f"{op.op} in {place}{line} (gain {op.gain:.1e})"
