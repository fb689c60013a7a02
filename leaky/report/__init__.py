"""Report: findings plus the per-module and per-op tables, and their JSON form.

Everything a view shows is computed here once, from `AuditStats` and the findings; the
terminal, JSON and later views only render it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from leaky.finding import Finding, Severity
from leaky.stats import AuditStats

SCHEMA = "leaky/report-v1"


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become strings, tuples become lists."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return _clean(value.item())
    return value


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]
    modules: tuple[dict, ...]
    ops: tuple[dict, ...]
    parameters: tuple[dict, ...]
    recurrences: tuple[dict, ...]
    run: dict = field(default_factory=dict)
    activations: tuple[dict, ...] = ()
    series: tuple[dict, ...] = ()
    batch_probes: tuple[dict, ...] = ()   # LK306: per root model probed, what the probe saw
    unconfirmed: tuple[dict, ...] = ()    # watch: findings announced live that the end no longer reports
    config: dict = field(default_factory=dict)   # how the run was set up (tables.py config_section)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.WARNING]

    def by_code(self, code: str) -> list[Finding]:
        return [f for f in self.findings if f.code == code or f.name == code]

    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=None)

    def to_dict(self) -> dict:
        import torch    # NOTE: here, not at the top: `leaky runs` and `show` read reports without torch

        from leaky.version import __version__

        counts = {s.value: sum(1 for f in self.findings if f.severity is s) for s in Severity}
        return _clean({
            "schema": SCHEMA,
            "leaky_version": __version__,
            "torch_version": torch.__version__,
            "run": self.run,
            "summary": counts,
            "findings": [f.to_dict() for f in self.findings],
            "modules": list(self.modules),
            "ops": list(self.ops),
            "parameters": list(self.parameters),
            "recurrences": list(self.recurrences),
            "activations": list(self.activations),
            "series": list(self.series),
            "batch_probes": list(self.batch_probes),
            "unconfirmed": list(self.unconfirmed),
            "config": self.config,
        })

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def __str__(self) -> str:
        from leaky.report.terminal import render_text

        return render_text(self)


def build_report(stats: AuditStats, findings: list[Finding], run: dict | None = None) -> Report:
    from leaky.report.tables import (activation_rows, batch_probe_rows, config_section, module_rows, op_rows,
                                     param_rows, recurrence_rows, series_rows)

    return Report(tuple(findings), tuple(module_rows(stats)), tuple(op_rows(stats)),
                  tuple(param_rows(stats)), tuple(recurrence_rows(stats)), dict(run or {}),
                  tuple(activation_rows(stats)), tuple(series_rows(stats)), tuple(batch_probe_rows(stats)),
                  config=config_section(stats))
