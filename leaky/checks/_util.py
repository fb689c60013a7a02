"""Small helpers the checks share: severity from thresholds, number formatting."""
from __future__ import annotations

import os

from leaky.finding import Severity, Source


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


def num(value: float | None) -> str:
    """A number the way a person reads it: 0.25, 3e-07, 1.2e+05."""
    if value is None:
        return "n/a"
    if value == 0:
        return "0"
    if 1e-3 <= abs(value) < 1e4:
        return f"{value:.3g}"
    return f"{value:.1e}"


def pct(share: float | None) -> str:
    return "n/a" if share is None else f"{100 * share:.0f}%"


def line_of(source: Source | None) -> str:
    """A source line for a message: file name and line (the finding keeps the full path)."""
    return "an unknown line" if source is None else f"{os.path.basename(source.file)}:{source.line}"
