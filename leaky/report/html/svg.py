"""The small SVG kit the charts are drawn with: colours, scales, ticks, text, the frame.

    x = Scale(lo, hi, left, right)                  # data -> pixels
    out = [svg_open("flow", width, height, "what the chart shows")]
    out.append(svg_text(x(k), top, decade(k), "tick", "middle"))
    out.append("</svg>")

Coordinates are written short and stable (`coord`), so the same data always draws the
same page. Log scales tick at whole decades (`decade_range`, `decade_ticks`, `decade`).
"""
from __future__ import annotations

import math

from leaky.report.html.values import esc

COLOR = {"collapse": "#d62728", "explosion": "#8e44ad", "ok": "#4e79a7", "unknown": "#9aa0a6",
         "flat": "#fde2e1", "grid": "#e4e6eb", "axis": "#5f6368", "error": "#c62828",
         "warning": "#b26a00", "info": "#1565c0"}
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
_VIRIDIS = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
_SUPER = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def coord(x: float) -> str:
    """Coordinates: short, stable."""
    return f"{x:.1f}".rstrip("0").rstrip(".") if x == x else "0"


def decade(k: int) -> str:
    """10^k as a label: 1, 10, 10⁻³."""
    if k == 0:
        return "1"
    if k == 1:
        return "10"
    return "10" + str(k).translate(_SUPER)


class Scale:
    """Linear map from a data interval onto a pixel interval."""

    def __init__(self, d0: float, d1: float, r0: float, r1: float):
        if d1 == d0:
            d0, d1 = d0 - 0.5, d1 + 0.5
        self.d0, self.d1, self.r0, self.r1 = d0, d1, r0, r1

    def __call__(self, v: float) -> float:
        return self.r0 + (v - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` ticks at round values (steps of 1, 2, 2.5 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9 and len(ticks) < 50:
        ticks.append(0.0 if abs(t) < step * 1e-9 else t)
        t += step
    return ticks


def tick_label(v: float) -> str:
    if v == int(v) and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.3g}"


def decade_range(logs: list[float]) -> tuple[int, int]:
    """Whole decades around the values; a minimum exactly on a decade gets one more below,
    so that its bar is not empty."""
    lo = math.floor(min(logs) + 1e-9)
    if min(logs) - lo < 0.05:
        lo -= 1
    hi = math.ceil(max(logs) - 1e-9)
    if hi <= lo:
        hi = lo + 1
    return lo, hi


def decade_ticks(lo: int, hi: int, most: int = 10) -> list[int]:
    stride = max(1, math.ceil((hi - lo) / most))
    return list(range(lo, hi + 1, stride))


def viridis(t: float) -> str:
    """The colour of t in [0, 1] on the viridis map (clamped)."""
    t = min(1.0, max(0.0, t)) * (len(_VIRIDIS) - 1)
    i = min(int(t), len(_VIRIDIS) - 2)
    a, b, w = _VIRIDIS[i], _VIRIDIS[i + 1], t - i
    return "#%02x%02x%02x" % tuple(round(a[k] + (b[k] - a[k]) * w) for k in range(3))


def svg_open(kind: str, width: float, height: float, label: str) -> str:
    """The opening tag of a chart: `<svg class="chart KIND">`, sized, labelled for readers."""
    return (f'<svg class="chart {kind}" role="img" aria-label="{esc(label)}" width="{coord(width)}" '
            f'height="{coord(height)}" viewBox="0 0 {coord(width)} {coord(height)}">')


def svg_text(x: float, y: float, text: str, cls: str = "", anchor: str = "start", extra: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    a = f' text-anchor="{anchor}"' if anchor != "start" else ""
    return f'<text x="{coord(x)}" y="{coord(y)}"{c}{a}{extra}>{esc(text)}</text>'


def swatch(color: str) -> str:
    """A small coloured square for a legend (HTML, beside the chart)."""
    return f'<span class="sw" style="background:{color}"></span>'


def flow_axis(x, lo: int, hi: int, height: int, top: int, left: float, plot: float, right: str) -> list[str]:
    """A gradient-flow chart's decade grid and labels, and its three column headings: the
    sites (`left` wide), the norm arriving (`plot` wide) and `right` (the report's gain, the
    comparison's B / A)."""
    out = []
    for k in decade_ticks(lo, hi):
        out.append(f'<line x1="{coord(x(k))}" y1="{top - 6}" x2="{coord(x(k))}" y2="{height - 8}" '
                   f'stroke="{COLOR["grid"]}"/>')
        out.append(svg_text(x(k), top - 10, decade(k), "tick", "middle"))
    out.append(svg_text(left - 8, 12, "loss end ↓ input end", "axis-label", "end"))
    out.append(svg_text(left + plot / 2, 12, "gradient norm arriving (log scale)", "axis-label", "middle"))
    out.append(svg_text(left + plot + 14, 12, right, "axis-label"))
    return out
