"""The leak metric of a finding, read from a run's statistics: before → after a fix.

Each check's headline number, measured at the same place (module, op or source line) in
the unfixed and the fixed run. Read from the statistics, not from findings, so a fixed run
that no longer triggers the check still has its number.
"""
from __future__ import annotations

import math
from typing import Callable

from leaky.checks._depth import depth_profile
from leaky.checks.dead_zone import judged_shares
from leaky.finding import Finding
from leaky.numbers import num, pct
from leaky.stats import AuditStats

# the value, or (what is measured, the value) where that depends on the finding; None: not measured
Metric = Callable[[Finding, AuditStats], "str | tuple[str, str] | None"]
METRICS: dict[str, tuple[str, Metric]] = {}


def metric(code: str, label: str):
    def register(function: Metric) -> Metric:
        METRICS[code] = (label, function)
        return function
    return register


def _activation(finding: Finding, stats: AuditStats):
    """The finding's activation site: its module, op and line (a module may run the same op
    at several lines, `F.relu` after each layer of a forward). None when a fix replaced the
    op at that line (a LeakyReLU has no dead units): another line's units are not its own.
    Without a line, its module and op, else its module."""
    if finding.source is not None:
        line = (finding.source.file, finding.source.line)
        return next((a for a in stats.activations if a.module == finding.module and a.op == finding.op
                     and a.source is not None and (a.source.file, a.source.line) == line), None)
    return next((a for a in stats.activations if a.module == finding.module and a.op == finding.op), None) or \
        next((a for a in stats.activations if a.module == finding.module), None)


@metric("LK101", "unit-samples in the flat region")
def _flat(finding, stats):
    """A sigmoid's or tanh's flat unit-samples; a softmax's one-hot rows, where the finding
    judged them: at its first step, or over the last observed steps (a collapse)."""
    act = _activation(finding, stats)
    if act is None:
        return None
    if finding.evidence.get("developed"):
        share, label = act.recent_flat_share, "rows one-hot over the last observed steps"
    elif "first_step_flat_row_share" in finding.evidence:
        share, label = act.first_flat_share, "rows one-hot at the first step"
    else:
        return pct(act.flat_share) if act.flat_share is not None else None
    return None if share is None else (label, pct(share))


@metric("LK102", "dead units")
def _dead(finding, stats):
    act = _activation(finding, stats)
    return f"{act.dead_units}/{act.units}" if act is not None and act.dead_units is not None else None


@metric("LK106", "gradient elements zeroed")
def _zeroed(finding, stats):
    """The share the finding was judged by (its evidence's `judged_by`): of the elements, as
    LK106 reads it (a bounded activation's share at a bound, dead_zone.judged_shares), or of
    the gradient's mass Σ|g| arriving (a clamp on the loss path that zeroes few elements
    carrying most of the gradient)."""
    if finding.source is None:
        return None
    by_mass = finding.evidence.get("judged_by") == "gradient mass"
    at_line = [op for op in stats.ops if op.source is not None
               and (op.source.file, op.source.line) == (finding.source.file, finding.source.line)]
    judged = {} if by_mass else judged_shares(stats)
    shares = [s for op in at_line if (s := op.zeroed_mass_share if by_mass else judged.get(op.site)) is not None]
    value = pct(max(shares)) if shares else pct(0.0)
    return ("gradient mass zeroed", value) if by_mass else value


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


@metric("LK304", "gradient elements flushed to 0")
def _precision(finding, stats):
    """The share the finding reports: float16 gradient elements flushed to 0 at its op, and/or
    of the low-precision weights' elements with a gradient, those a step left unchanged."""
    parts = []
    if "zero_share" in finding.evidence:
        shares = [op.underflow_share for op in stats.ops if op.underflow_share is not None and op.steps]
        parts.append(("gradient elements flushed to 0", pct(max(shares)) if shares else "none in float16"))
    if "unchanged_share" in finding.evidence or finding.evidence.get("rounded_updates"):
        low = [(p.rounded_share, math.prod(p.shape)) for p in stats.params
               if p.rounded_share is not None and p.in_optimizer and p.dtype in ("float16", "bfloat16")]
        size = sum(n for _, n in low)
        parts.append(("weight updates rounded away", pct(sum(s * n for s, n in low) / size) if size
                      else "no float16/bfloat16 weights"))
    if not parts:
        return None
    return " / ".join(label for label, _ in parts), " / ".join(value for _, value in parts)


def measure(finding: Finding, stats: AuditStats | None, findings: list[Finding]) -> tuple[str, str]:
    """(what is measured, the value) in one run; without a metric, whether the finding is there."""
    label, function = METRICS.get(finding.code, ("finding", None))
    value = function(finding, stats) if function is not None and stats is not None else None
    if isinstance(value, tuple):
        return value
    if value is not None:
        return label, value
    match = next((f for f in findings if f.code == finding.code and f.module == finding.module
                  and f.source == finding.source and f.severity.value != "info"), None)
    return "finding", match.severity.value if match is not None else "gone"
