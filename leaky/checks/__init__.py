"""The check catalog: one file per check, registered under a stable code and name.

A check is a pure function `(AuditStats, AuditConfig) -> list[Finding]`. It never touches
hooks and never prints. Its explanation page is `leaky/pages/<CODE>-<name>.md`. A probe
check (LK308, LK309: `probe=True`) is judged by `leaky probe` on what its active runs
measured, `(leaky.probe.stats record, ProbeConfig) -> list[Finding]`; an audit skips it.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Callable

from leaky.config import AuditConfig
from leaky.finding import Finding
from leaky.stats import AuditStats

CheckFn = Callable[[AuditStats, AuditConfig], list[Finding]]


@dataclass(frozen=True)
class Check:
    code: str
    name: str
    summary: str
    run: CheckFn
    links: bool = False   # runs after the others and receives their findings, to name a cause
    probe: bool = False   # judged by `leaky probe` on its runs' measurements, not by an audit


CHECKS: dict[str, Check] = {}

_MODULES = ("saturated_activation", "dead_units", "vanishing_gradient", "exploding_gradient",
            "recurrent_instability", "dead_zone", "non_finite", "no_gradient_path",
            "stale_parameter", "update_ratio", "gradient_accumulation", "loss_not_decreasing",
            "loss_diverging", "loss_output_mismatch", "bad_initialization", "unnormalized_input",
            "precision_underflow", "wrong_gradient", "batch_mixing", "loss_at_init")
_PROBE_MODULES = ("cannot_overfit", "input_ignored")


def register(code: str, name: str, summary: str, links: bool = False,
             probe: bool = False) -> Callable[[CheckFn], CheckFn]:
    """Add a check. With links=True it is called as fn(stats, config, findings_of_the_others);
    with probe=True only `leaky probe` calls it, on its runs' measurements."""
    def add(fn: CheckFn) -> CheckFn:
        if code in CHECKS:
            raise ValueError(f"check code {code} registered twice")
        CHECKS[code] = Check(code, name, summary, fn, links, probe)
        return fn
    return add


def lookup(key: str) -> Check:
    """A check by code (LK106) or name (dead-zone), case-insensitive."""
    wanted = key.strip().lower()
    for check in CHECKS.values():
        if wanted in (check.code.lower(), check.name):
            return check
    known = ", ".join(f"{c.code} {c.name}" for c in CHECKS.values())
    raise KeyError(f"no check called {key!r}; known checks: {known}")


def run_all(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings: list[Finding] = []
    audited = [check for check in CHECKS.values() if not check.probe]
    for check in audited:
        if not check.links:
            findings.extend(check.run(stats, config))
    causes = list(findings)
    for check in audited:
        if check.links:
            findings.extend(check.run(stats, config, causes))
    return sort_findings(findings)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then by code and place; but a finding that explains another (its
    code in the other's evidence `explained_by`, or the other's code and module in its own
    evidence `explains`) comes right before it: the root cause is read before its symptom."""
    ranked = sorted(findings, key=lambda f: (-f.severity.rank, f.code, f.module or "",
                                             f.source.line if f.source else 0))
    placed: set[int] = set()
    out: list[Finding] = []

    def place(finding: Finding, visiting: frozenset[int]) -> None:
        if id(finding) in placed or id(finding) in visiting:
            return
        for other in ranked:
            if other is not finding and _explains(other, finding):
                place(other, visiting | {id(finding)})
        placed.add(id(finding))
        out.append(finding)

    for finding in ranked:
        place(finding, frozenset())
    return out


def _explains(cause: Finding, symptom: Finding) -> bool:
    if cause.code in (symptom.evidence.get("explained_by") or ()):
        return True
    return any(isinstance(e, dict) and e.get("code") == symptom.code and e.get("module") == symptom.module
               for e in cause.evidence.get("explains") or ())


for _name in _MODULES + _PROBE_MODULES:
    import_module(f"leaky.checks.{_name}")
