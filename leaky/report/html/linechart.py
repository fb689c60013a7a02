"""Line charts: series over steps (or time steps), on a linear or a log10 axis, with
markers at steps where a finding appeared, × at non-finite steps and a reference line.

    line_chart("loss", "loss per step", [("loss", [(0.0, 2.3), (1.0, 2.1)], "#1f3b5c")],
               log_y=False, x_label="step", y_label="loss")

A series is (name, [(x, y or None)], colour); None leaves a gap. `spread` thins a long
series for drawing, keeping each bucket's lowest and highest value so spikes stay visible.
"""
from __future__ import annotations

import math
from typing import Callable

from leaky.report.html.svg import (COLOR, Scale, coord, decade, decade_range, decade_ticks, nice_ticks, svg_open,
                                   svg_text, swatch, tick_label)
from leaky.report.html.values import esc, value_text

Points = list[tuple[float, float | None]]
Series = list[tuple[str, Points, str]]
Axis = tuple[Callable[[float], float], list[tuple[float, str]]]   # the y map and its (pixel, label) ticks

LEFT, RIGHT, TOP, BOTTOM = 62, 16, 22, 40      # margins around the plot area
LEGEND_ENTRIES = 24


def spread(points: Points, most: int) -> Points:
    """At most ~`most` points of a long series for drawing: per bucket, its lowest and highest
    value (in step order), so spikes and drops stay visible; gaps (None) are kept."""
    if len(points) <= most:
        return points
    size = math.ceil(len(points) / (most / 2))
    kept: Points = []
    for start in range(0, len(points), size):
        bucket = points[start:start + size]
        if any(y is None for _, y in bucket):
            kept.append(next(p for p in bucket if p[1] is None))
        present = [p for p in bucket if p[1] is not None]
        if present:
            low = min(present, key=lambda p: p[1])
            high = max(present, key=lambda p: p[1])
            kept.extend(sorted({low, high}, key=lambda p: p[0]))
    return kept


def line_chart(kind: str, label: str, series: Series, *, log_y: bool, x_label: str, y_label: str,
               width: int = 1000, height: int = 260, markers: list[tuple[float, str, str]] | None = None,
               bad_x: list[float] | None = None, ref: tuple[float, str] | None = None,
               y_range: tuple[float, float] | None = None, dots: bool = False) -> str:
    """The chart's SVG, or a line saying there is nothing to plot. `markers`: (x, colour,
    hover text); `bad_x`: the x of non-finite steps; `ref`: (y, label) of a dashed line."""
    pts_all = [(px, py) for _, pts, _ in series for px, py in pts if py is not None]
    if log_y:
        pts_all = [(px, py) for px, py in pts_all if py > 0]
    xs = [px for px, _ in pts_all] + [m[0] for m in markers or []] + list(bad_x or [])
    if not xs:
        return '<p class="none">nothing to plot</p>'
    x = Scale(min(xs), max(xs), LEFT, width - RIGHT)
    axis = _log_axis(pts_all, ref, height) if log_y else _linear_axis(pts_all, y_range, height)
    if axis is None:
        return '<p class="none">nothing to plot on a log scale</p>'
    y, ticks = axis
    out = [svg_open(kind, width, height, label)]
    out.extend(_axes(width, height, x, xs, ticks, x_label, y_label))
    if ref is not None:
        out.extend(_reference(width, y, ref))
    out.extend(_markers(x, height, markers or []))
    out.extend(_nonfinite(x, bad_x or []))
    for name, pts, color in series:
        out.extend(_series(name, pts, color, x, y, log_y, dots))
    out.append("</svg>")
    return "".join(out)


def _log_axis(points: Points, ref: tuple[float, str] | None, height: int) -> Axis | None:
    logs = [math.log10(py) for _, py in points] + ([math.log10(ref[0])] if ref else [])
    if not logs:
        return None
    lo, hi = decade_range(logs)
    ys = Scale(lo, hi, height - BOTTOM, TOP)
    return (lambda v: ys(math.log10(v))), [(ys(k), decade(k)) for k in decade_ticks(lo, hi, 6)]


def _linear_axis(points: Points, y_range: tuple[float, float] | None, height: int) -> Axis:
    vals = [py for _, py in points]
    lo_v, hi_v = y_range if y_range else ((min(vals), max(vals)) if vals else (0.0, 1.0))
    if hi_v <= lo_v:
        lo_v, hi_v = lo_v - 0.5, hi_v + 0.5
    y = Scale(lo_v, hi_v, height - BOTTOM, TOP)
    return y, [(y(t), tick_label(t)) for t in nice_ticks(lo_v, hi_v, 4)]


def _axes(width: int, height: int, x: Scale, xs: list[float], ticks: list[tuple[float, str]],
          x_label: str, y_label: str) -> list[str]:
    """Grid lines at the y ticks, whole-number x ticks, the x axis and both axis labels."""
    out = []
    for ty, tl in ticks:
        out.append(f'<line x1="{LEFT}" y1="{coord(ty)}" x2="{width - RIGHT}" y2="{coord(ty)}" '
                   f'stroke="{COLOR["grid"]}"/>')
        out.append(svg_text(LEFT - 6, ty + 3, tl, "tick", "end"))
    for t in nice_ticks(min(xs), max(xs), 8):
        if t == int(t):
            out.append(svg_text(x(t), height - BOTTOM + 14, tick_label(t), "tick", "middle"))
    out.append(f'<line x1="{LEFT}" y1="{height - BOTTOM}" x2="{width - RIGHT}" y2="{height - BOTTOM}" '
               f'stroke="{COLOR["axis"]}"/>')
    out.append(svg_text((LEFT + width - RIGHT) / 2, height - 6, x_label, "axis-label", "middle"))
    middle = TOP + (height - TOP - BOTTOM) / 2
    out.append(svg_text(12, middle, y_label, "axis-label", "middle",
                        extra=f' transform="rotate(-90 12 {coord(middle)})"'))
    return out


def _reference(width: int, y: Callable[[float], float], ref: tuple[float, str]) -> list[str]:
    ry = y(ref[0])
    return [f'<line x1="{LEFT}" y1="{coord(ry)}" x2="{width - RIGHT}" y2="{coord(ry)}" '
            f'stroke="{COLOR["axis"]}" stroke-dasharray="5 4"/>',
            svg_text(LEFT + 4, ry - 4, ref[1], "note")]


def _markers(x: Scale, height: int, markers: list[tuple[float, str, str]]) -> list[str]:
    """A dashed vertical line and a ▼ at each marker, with its hover text."""
    out = []
    for mx, color, tip in markers:
        px = x(mx)
        out.append(f'<g class="marker"><title>{esc(tip)}</title><line x1="{coord(px)}" y1="{TOP}" '
                   f'x2="{coord(px)}" y2="{height - BOTTOM}" stroke="{color}" stroke-width="1.5" '
                   f'stroke-dasharray="4 3"/><path d="M{coord(px - 5)} {TOP - 9}h10l-5 8z" fill="{color}"/></g>')
    return out


def _nonfinite(x: Scale, bad_x: list[float]) -> list[str]:
    """A red × over each step whose loss or gradient was not finite."""
    return [f'<g class="nonfinite"><title>step {esc(value_text(bx))}: loss or gradient not finite</title>'
            f'<text x="{coord(x(bx))}" y="{TOP + 8}" text-anchor="middle" fill="{COLOR["error"]}">×</text></g>'
            for bx in bad_x]


def _segments(pts: Points, x: Scale, y: Callable[[float], float], log_y: bool) -> list[list[str]]:
    """The series' drawable runs of points ("x,y"), split at gaps (and at y <= 0 on a log axis)."""
    run: list[str] = []
    segments: list[list[str]] = []
    for px, py in pts:
        if py is None or (log_y and py <= 0):
            if run:
                segments.append(run)
            run = []
            continue
        run.append(f"{coord(x(px))},{coord(y(py))}")
    if run:
        segments.append(run)
    return segments


def _series(name: str, pts: Points, color: str, x: Scale, y: Callable[[float], float], log_y: bool,
            dots: bool) -> list[str]:
    """One series: a polyline per run of points, dots where a run is a single point (or `dots`)."""
    out = [f'<g class="series"><title>{esc(name)}</title>']
    for seg in _segments(pts, x, y, log_y):
        if len(seg) == 1 or dots:
            for p in seg:
                cx, cy = p.split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2.2" fill="{color}"/>')
        if len(seg) > 1:
            out.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{color}" '
                       f'stroke-width="1.6"/>')
    out.append("</g>")
    return out


def legend(names: list[tuple[str, str]]) -> str:
    """A legend of (name, colour) under a chart of several series; none for one series."""
    if len(names) < 2:
        return ""
    items = "".join(f'<span class="li">{swatch(c)}{esc(n)}</span>' for n, c in names[:LEGEND_ENTRIES])
    more = (f'<span class="li">… {len(names) - LEGEND_ENTRIES} more (hover a line)</span>'
            if len(names) > LEGEND_ENTRIES else "")
    return f'<div class="legend">{items}{more}</div>'
