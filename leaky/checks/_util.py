"""Small helpers the checks share: severity from thresholds.

Numbers and source lines are written by `leaky.numbers` (re-exported here).
"""
from __future__ import annotations

from leaky.finding import Severity
from leaky.numbers import line_of, num, pct

__all__ = ["line_of", "listed", "num", "pct", "severity_above", "severity_below"]


def listed(names, most: int, sep: str = ", ") -> str:
    """The first `most` names, then how many were left out: a message that names some of a
    list must not read as the whole of it ('over fc1, fc21, fc22, fc3' for five layers)."""
    names = list(names)
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return sep.join(names[:most]) + more


def severity_above(value: float, warning: float, error: float) -> Severity | None:
    """Severity for a value that is bad when large."""
    if value >= error:
        return Severity.ERROR
    if value >= warning:
        return Severity.WARNING
    return None


def severity_below(value: float, warning: float, error: float) -> Severity | None:
    """Severity for a value that is bad when small."""
    if value <= error:
        return Severity.ERROR
    if value <= warning:
        return Severity.WARNING
    return None
