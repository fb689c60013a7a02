"""The report's tables: per module (loss to input), per op, per parameter, per recurrence."""
from __future__ import annotations

from collections import defaultdict

from leaky.stats import AuditStats, OpStats, thin

SCRIPT = "<script>"   # ops that ran outside any module: the loss code, usually


def _max(values):
    present = [v for v in values if v is not None]
    return max(present) if present else None


def module_rows(stats: AuditStats) -> list[dict]:
    """One row per module that ran backward, ordered from the loss end to the input end."""
    groups: dict[str, list[OpStats]] = defaultdict(list)
    for op in stats.ops:
        if op.steps:
            groups[op.module if op.module is not None else SCRIPT].append(op)
    acts: dict[str, list] = defaultdict(list)
    for act in stats.activations:
        acts[act.module if act.module is not None else SCRIPT].append(act)
    rows = []
    for name, ops in groups.items():
        entry = max(ops, key=lambda op: op.first_seq)
        leaving = [op for op in ops if op.grad_out is not None]
        exit_op = min(leaving, key=lambda op: op.first_seq) if leaving else None
        gain = None
        if exit_op is not None and entry.grad_in:
            gain = exit_op.grad_out / entry.grad_in
        dead = _max(a.dead_units / a.units for a in acts[name] if a.dead_units is not None and a.units)
        rows.append({
            "module": name,
            "type": stats.module_types.get(name, "") if name != SCRIPT else "",
            "order": entry.first_seq,
            "grad_norm": entry.grad_in,
            "gain": gain,
            "zeroed_share": _max(op.zeroed_share for op in ops),
            "dead_share": dead,
            "saturated_share": _max(a.flat_share for a in acts[name]),
            "ops": len(ops),
        })
    rows.sort(key=lambda row: -row["order"])
    return rows


def op_rows(stats: AuditStats) -> list[dict]:
    return [{
        "site": op.site, "op": op.op, "node": op.node, "module": op.module,
        "source": None if op.source is None else {"file": op.source.file, "line": op.source.line},
        "order": op.first_seq, "steps": op.steps, "occurrences_per_step": op.occurrences,
        "grad_in": op.grad_in, "grad_out": op.grad_out, "grad_param": op.grad_param, "gain": op.gain,
        "zeroed_share": op.zeroed_share,
    } for op in stats.ops]


def param_rows(stats: AuditStats) -> list[dict]:
    return [{"name": p.name, "module": p.module, "shape": list(p.shape), "requires_grad": p.requires_grad,
             "in_optimizer": p.in_optimizer, "grad_steps": p.grad_steps, "grad_norm": p.grad_norm,
             "update_ratio": p.update_ratio, "update_ratio_max": p.update_ratio_max,
             "zero_update_steps": p.zero_update_steps, "graded_update_steps": p.graded_update_steps}
            for p in stats.params]


def recurrence_rows(stats: AuditStats) -> list[dict]:
    return [{"module": r.module, "param": r.param, "kind": r.kind, "gated": r.gated,
             "spectral_radius": r.spectral_radius, "time_steps": len(r.profile) if r.profile else 0,
             "time_profile": list(thin(r.profile)) if r.profile else None}
            for r in stats.recurrences]


def activation_rows(stats: AuditStats) -> list[dict]:
    return [{"site": a.site, "op": a.op, "family": a.family, "module": a.module,
             "source": None if a.source is None else {"file": a.source.file, "line": a.source.line},
             "units": a.units, "samples_per_unit": a.samples,
             "dead_share": a.dead_units / a.units if a.dead_units is not None and a.units else None,
             "flat_share": a.flat_share, "median_local_derivative_share": a.median_derivative_share,
             "peaked_share": a.peaked_share, "histogram": a.histogram}
            for a in stats.activations]


def series_rows(stats: AuditStats) -> list[dict]:
    return [{"step": row.step, "loss": row.loss, "grad_norm": row.grad_norm, "lr": row.lr, "optimizer": row.optimizer}
            for row in stats.series]
