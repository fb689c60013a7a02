"""The leak metric of a finding, read from a run's statistics: before → after a fix.

Each check declares its headline number where it is judged (`@headline` in its own file,
leaky/checks/): measured at the same place (module, op or source line) in the unfixed and
the fixed run. Read from the statistics, not from findings, so a fixed run that no longer
triggers the check still has its number.
"""
from __future__ import annotations

from leaky.checks import HEADLINES
from leaky.finding import Finding
from leaky.stats import AuditStats


def measure(finding: Finding, stats: AuditStats | None, findings: list[Finding]) -> tuple[str, str]:
    """(what is measured, the value) in one run; without a metric, whether the finding is there."""
    label, function = HEADLINES.get(finding.code, ("finding", None))
    value = function(finding, stats) if function is not None and stats is not None else None
    if isinstance(value, tuple):
        return value
    if value is not None:
        return label, value
    match = next((f for f in findings if f.code == finding.code and f.module == finding.module
                  and f.source == finding.source and f.severity.value != "info"), None)
    return "finding", match.severity.value if match is not None else "gone"
