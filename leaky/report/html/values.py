"""Report values as page text: read the JSON's numbers, write them for a person, escape them.

The JSON report writes non-finite floats as the strings "nan", "inf" and "-inf"
(`leaky.report._clean`); `as_float` reads them back. Every string that reaches the page
from the user's program goes through `esc`.
"""
from __future__ import annotations

import html as _html
import math
from typing import Any

from leaky.report.format import num, short_path


def esc(value: Any) -> str:
    """Escape anything for HTML text and attribute values (quotes included)."""
    return _html.escape(str(value), quote=True)


def as_float(value: Any) -> float | None:
    """A float from a report value (numbers, or the strings 'nan', 'inf', '-inf'); else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def positive(value: Any) -> float | None:
    """A finite positive float (plottable on a log scale), else None."""
    x = as_float(value)
    return x if x is not None and math.isfinite(x) and x > 0 else None


def finite(value: Any) -> float | None:
    """A finite float, else None."""
    x = as_float(value)
    return x if x is not None and math.isfinite(x) else None


def value_text(value: Any) -> str:
    """A report value the way a person reads it."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return num(value)
    return str(value)


def share_text(value: Any) -> str:
    """A share in [0, 1] as a percentage; "n/a" when it is missing or not finite."""
    x = finite(value)
    return "n/a" if x is None else f"{100 * x:.0f}%"


def source_text(source: Any) -> tuple[str, str]:
    """(short file:line, full path) of a source dict."""
    if not isinstance(source, dict) or not source.get("file"):
        return "", ""
    full = str(source["file"])
    line = source.get("line")
    short = short_path(full) + (f":{line}" if line is not None else "")
    return short, full
