"""Small helpers the checks share: severity from thresholds.

Numbers and source lines are written by `leaky.numbers` (re-exported here).
"""
from __future__ import annotations

from leaky.finding import Severity
from leaky.numbers import line_of, num, pct

__all__ = ["line_of", "num", "pct", "severity_above", "severity_below"]


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
