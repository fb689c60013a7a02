"""How leaky writes a number, a share and a source line, in every message and every view.

    num(3.2e-07) == "3.2e-07"    num(0.25) == "0.25"    num(None) == "n/a"
    pct(0.5) == "50%"            line_of(Source("/x/train.py", 12)) == "train.py:12"

The checks use these in their messages and the reports in their tables, so a number reads
the same wherever leaky shows it. Both import it from here: the checks import nothing from
`report/`, and the reports nothing from the checks' internals.
"""
from __future__ import annotations

import os

from leaky.finding import Source


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
    """A share in [0, 1] as a whole percentage: 0.5 -> 50%."""
    return "n/a" if share is None else f"{100 * share:.0f}%"


def line_of(source: Source | None) -> str:
    """A source line for a message: file name and line (the finding keeps the full path)."""
    return "an unknown line" if source is None else f"{os.path.basename(source.file)}:{source.line}"


__all__ = ["line_of", "num", "pct"]
