"""The report's tables: per module (loss to input), per op, per parameter, per recurrence."""
from __future__ import annotations

from leaky.stats import AuditStats, thin

def module_rows(stats: AuditStats) -> list[dict]:
    """The gradient-flow table (AuditStats.module_table, computed by derive/modules.py), as rows."""
    return [{"module": row.module, "type": row.type, "order": row.order, "grad_norm": row.grad_norm, "gain": row.gain,
             "zeroed_share": row.zeroed_share, "dead_share": row.dead_share, "saturated_share": row.saturated_share,
             "ops": row.ops, "update_ratio": row.update_ratio} for row in stats.module_table]


def op_rows(stats: AuditStats) -> list[dict]:
    return [{
        "site": op.site, "op": op.op, "node": op.node, "module": op.module,
        "source": None if op.source is None else {"file": op.source.file, "line": op.source.line},
        "order": op.first_seq, "steps": op.steps, "occurrences_per_step": op.occurrences,
        "grad_in": op.grad_in, "grad_out": op.grad_out, "grad_param": op.grad_param, "gain": op.gain,
        "zeroed_share": op.zeroed_share, "gain_spread": op.gain_spread,
    } for op in stats.ops]


def param_rows(stats: AuditStats) -> list[dict]:
    return [{"name": p.name, "module": p.module, "shape": list(p.shape), "requires_grad": p.requires_grad,
             "in_optimizer": p.in_optimizer, "grad_steps": p.grad_steps, "grad_norm": p.grad_norm,
             "update_ratio": p.update_ratio, "update_ratio_max": p.update_ratio_max,
             "zero_update_steps": p.zero_update_steps, "graded_update_steps": p.graded_update_steps, "dtype": p.dtype}
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


def batch_probe_rows(stats: AuditStats) -> list[dict]:
    """LK306's probe of each root model: judged or why not, and where mixing starts."""
    return [{"model": p.model, "judged": p.judged, "mixed": p.mixed, "note": p.note or None,
             "differentiated": p.point or None, "batch": p.batch or None, "samples_reached": p.reached,
             "first_op": p.op, "first_module": p.module, "source": str(p.source) if p.source else None,
             "by_design": p.by_design, "batchnorm_eval": list(p.batchnorm_eval)} for p in stats.batch_mixing]
