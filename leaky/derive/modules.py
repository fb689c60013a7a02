"""The per-module table, computed once: the gradient entering each module from the loss
side, the gain across it, the worst zeroed share, dead and saturated units, and the
largest update ratio of its weights.

The report's gradient-flow table, LK103/LK104's loss-to-input profile and a watch's
stored per-module rows all read it (AuditStats.module_table).
"""
from __future__ import annotations

from collections import defaultdict

from leaky.stats import ActivationStats, ModuleRow, OpStats, ParamStats, RecurrenceStats

SCRIPT = "<script>"   # ops that ran outside any module: the loss code, usually


def _max(values):
    present = [v for v in values if v is not None]
    return max(present) if present else None


def module_table(ops: tuple[OpStats, ...], activations: tuple[ActivationStats, ...],
                 params: tuple[ParamStats, ...], recurrences: tuple[RecurrenceStats, ...],
                 types: dict[str, str]) -> tuple[ModuleRow, ...]:
    """One row per module that ran backward, ordered from the loss end to the input end."""
    groups: dict[str, list[OpStats]] = defaultdict(list)
    for op in ops:
        if op.steps:
            groups[op.module if op.module is not None else SCRIPT].append(op)
    acts: dict[str, list] = defaultdict(list)
    for act in activations:
        acts[act.module if act.module is not None else SCRIPT].append(act)
    trainable = {p.module for p in params if p.requires_grad and p.grad_steps > 0}
    recurrent = {r.module for r in recurrences}
    ratios = defaultdict(list)
    for p in params:
        if p.update_ratio is not None and len(p.shape) >= 2:
            ratios[p.module].append(p.update_ratio)
    rows = [_row(name, group, acts[name], types, name in trainable, name in recurrent, _max(ratios[name]))
            for name, group in groups.items()]
    return tuple(sorted(rows, key=lambda row: -row.order))


def _row(name: str, ops: list[OpStats], acts: list, types: dict, trainable: bool, recurrent: bool,
         update_ratio) -> ModuleRow:
    measured = [op for op in ops if op.grad_in is not None]
    entry = max(measured or ops, key=lambda op: op.first_seq)
    leaving = [op for op in ops if op.grad_out is not None]
    exit_op = min(leaving, key=lambda op: op.first_seq) if leaving else None
    gain = exit_op.grad_out / entry.grad_in if exit_op is not None and entry.grad_in else None
    dead = _max(a.dead_units / a.units for a in acts if a.dead_units is not None and a.units)
    return ModuleRow(name, types.get(name, "") if name != SCRIPT else "", entry.first_seq,
                     min(op.first_seq for op in measured or ops), entry.site if measured else None,
                     entry.grad_in, gain, _max(op.zeroed_share for op in ops), dead,
                     _max(a.flat_share for a in acts), len(ops), trainable, recurrent, update_ratio)
