"""The report's tables: per module (loss to input), per op, per parameter, per recurrence."""
from __future__ import annotations

import math
import statistics
from collections import Counter

from leaky.finding import Source
from leaky.stats import AuditStats, InputStats, OptimizerStats, thin


def source_row(source: Source | None) -> dict | None:
    return None if source is None else {"file": source.file, "line": source.line}


def module_rows(stats: AuditStats) -> list[dict]:
    """The gradient-flow table (AuditStats.module_table, computed by derive/modules.py), as rows."""
    return [{"module": row.module, "type": row.type, "order": row.order, "grad_norm": row.grad_norm, "gain": row.gain,
             "zeroed_share": row.zeroed_share, "dead_share": row.dead_share, "saturated_share": row.saturated_share,
             "ops": row.ops, "update_ratio": row.update_ratio} for row in stats.module_table]


def op_rows(stats: AuditStats) -> list[dict]:
    return [{
        "site": op.site, "op": op.op, "node": op.node, "module": op.module,
        "source": source_row(op.source), "order": op.first_seq, "steps": op.steps,
        "occurrences_per_step": op.occurrences,
        "grad_in": op.grad_in, "grad_out": op.grad_out, "grad_param": op.grad_param, "gain": op.gain,
        "zeroed_share": op.zeroed_share, "gain_spread": op.gain_spread, "position": op.position,
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
             "source": source_row(a.source), "units": a.units, "samples_per_unit": a.samples,
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


def config_section(stats: AuditStats) -> dict:
    """How the run was set up, as `leaky diff` compares two runs: its optimizers and schedulers,
    layer weights as first seen, raw inputs, casts to half precision, parameter dtypes, and the
    script's train()/eval() calls (docs/report-schema.md `config`)."""
    return {
        "optimizers": [_optimizer_row(o) for o in stats.optimizers],
        "weights": [{"module": w.module, "param": w.param, "kind": w.kind, "shape": list(w.shape), "fan_in": w.fan_in,
                     "fan_out": w.fan_out, "std": w.std, "init_source": source_row(w.init_source)}
                    for w in stats.weights],
        "inputs": [_input_row(i) for i in stats.inputs],
        "casts": [{"kind": c.kind, "dtype": c.dtype, "source": source_row(c.source), "target": c.target}
                  for c in stats.casts],
        "dtypes": dict(Counter(p.dtype for p in stats.params if p.dtype)),
        "modes": list(stats.derived.get("mode_calls", ())),
    }


def _optimizer_row(o: OptimizerStats) -> dict:
    s = o.scheduler
    scheduler = None if s is None else {"kind": s.kind, "source": source_row(s.source),
                                        "step_source": source_row(s.step_source), "step_calls": s.step_calls}
    # NOTE: keywords, not string keys: "index" is also an op's name (tests/meta: op vocabulary)
    return dict(index=o.index, kind=o.kind, name=o.name, source=source_row(o.source), initial_lrs=list(o.initial_lrs),
                lr_range=[None if r is None else list(r) for r in o.lr_range], scheduler=scheduler)


def _input_row(i: InputStats) -> dict:
    """The raw data's scale per feature: its largest |mean|, its median std, and its RMS,
    sqrt(mean over features of mean² + std²)."""
    features = len(i.mean)
    return {"module": i.module, "op": i.op, "source": source_row(i.source), "samples": i.samples,
            "mean_abs_max": max(abs(m) for m in i.mean) if features else None,
            "std_median": statistics.median(i.std) if i.std else None,
            "rms": math.sqrt(sum(m * m + s * s for m, s in zip(i.mean, i.std)) / features) if features else None,
            "made_source": source_row(i.made_source)}
