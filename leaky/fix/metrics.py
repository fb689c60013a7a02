"""The leak metric of a finding, read from a run's statistics: before → after a fix.

Each check's headline number, measured at the same place (module, op or source line) in
the unfixed and the fixed run. Read from the statistics, not from findings, so a fixed run
that no longer triggers the check still has its number.
"""
from __future__ import annotations

from typing import Callable

from leaky.checks._depth import depth_profile
from leaky.finding import Finding
from leaky.numbers import num, pct
from leaky.stats import AuditStats

Metric = Callable[[Finding, AuditStats], "str | None"]
METRICS: dict[str, tuple[str, Metric]] = {}


def metric(code: str, label: str):
    def register(function: Metric) -> Metric:
        METRICS[code] = (label, function)
        return function
    return register


def _activation(finding: Finding, stats: AuditStats):
    """The finding's activation site: its module, op and line (a module may run the same op
    at several lines, `F.relu` after each layer of a forward), else its module and op."""
    line = None if finding.source is None else (finding.source.file, finding.source.line)
    same = [a for a in stats.activations if a.module == finding.module and a.op == finding.op]
    at_line = [a for a in same if a.source is not None and (a.source.file, a.source.line) == line]
    return next(iter(at_line + same), None) or \
        next((a for a in stats.activations if a.module == finding.module), None)


@metric("LK101", "unit-samples in the flat region")
def _flat(finding, stats):
    act = _activation(finding, stats)
    return pct(act.flat_share) if act is not None and act.flat_share is not None else None


@metric("LK102", "dead units")
def _dead(finding, stats):
    act = _activation(finding, stats)
    return f"{act.dead_units}/{act.units}" if act is not None and act.dead_units is not None else None


@metric("LK106", "gradient elements zeroed")
def _zeroed(finding, stats):
    if finding.source is None:
        return None
    shares = [op.zeroed_share for op in stats.ops if op.source is not None and op.zeroed_share is not None
              and (op.source.file, op.source.line) == (finding.source.file, finding.source.line)]
    return pct(max(shares)) if shares else pct(0.0)


@metric("LK103", "gradient at the first layer / at the last")
def _depth_ratio(finding, stats):
    profile = depth_profile(stats)
    return num(profile.ratio) if profile is not None else None


@metric("LK105", "gradient growth over time steps")
def _growth(finding, stats):
    rec = next((r for r in stats.recurrences if r.module == finding.module), None)
    if rec is None:
        return None
    if rec.profile and rec.profile[-1] > 0:
        return f"{num(rec.profile[0] / rec.profile[-1])}× (radius {rec.spectral_radius:.2f})"
    return f"radius {rec.spectral_radius:.2f}"


@metric("LK202", "largest update/weight ratio")
def _update(finding, stats):
    name = finding.evidence.get("parameter")
    param = next((p for p in stats.params if p.name == name), None)
    if param is None or param.update_ratio_max is None:
        return None
    return num(param.update_ratio_max)


def measure(finding: Finding, stats: AuditStats | None, findings: list[Finding]) -> tuple[str, str]:
    """(what is measured, the value) in one run; without a metric, whether the finding is there."""
    label, function = METRICS.get(finding.code, ("finding", None))
    value = function(finding, stats) if function is not None and stats is not None else None
    if value is not None:
        return label, value
    match = next((f for f in findings if f.code == finding.code and f.module == finding.module
                  and f.source == finding.source and f.severity.value != "info"), None)
    return "finding", match.severity.value if match is not None else "gone"
