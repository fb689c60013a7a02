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
    trainable = {p.module for p in stats.params if p.requires_grad and p.grad_steps > 0}
    recurrent = {r.module for r in stats.recurrences}
    entries: dict[str, OpStats] = {}
    starts: dict[str, int] = {}
    for op in stats.ops:
        if op.module not in trainable or op.grad_in is None or op.module in recurrent:
            continue
        current = entries.get(op.module)
        if current is None or op.first_seq > current.first_seq:
            entries[op.module] = op
        starts[op.module] = min(starts.get(op.module, op.first_seq), op.first_seq)
    if len(entries) < 2:
        return None
    order = sorted(entries, key=lambda name: starts[name])
    earliest, latest = entries[order[0]], entries[order[-1]]
    if not latest.grad_in or not math.isfinite(latest.grad_in) or not math.isfinite(earliest.grad_in):
        return None
    path = tuple(op for op in stats.ops
                 if op.gain is not None and earliest.first_seq <= op.first_seq <= latest.first_seq
                 and op.steps > 0)
    return DepthProfile(earliest, latest, earliest.grad_in / latest.grad_in, path, len(entries))


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
