"""Two runs drawn over each other, for `leaky diff A B`: the gradient flow per aligned site
and the loss per step, A and B as two polylines in their own colours with a legend.

    flow_overlay([{"label": "fc2 · linear", "a": 0.8, "b": 0.7, "parted": False}, ...], "A", "B")
    loss_overlay({"optimizer": 0, "a": [2.3, 2.1], "b": [2.3, 2.4], "parted_at": 1}, "A", "B")

The flow chart has a row per aligned site, from the loss (top) to the input (bottom), and
the gradient norm arriving on a log scale across; the first parted site is marked ◆ and
its row tinted, every other parted row only tinted. The loss chart is `line_chart` with
two series and a marker at the step where B parts from A.
"""
from __future__ import annotations

import math

from leaky.report.format import ellipsize
from leaky.report.html.linechart import legend, line_chart, spread
from leaky.report.html.svg import (COLOR, PALETTE, Scale, coord, decade_range, flow_axis, svg_open,
                                   svg_text)
from leaky.report.html.values import esc, finite, positive, value_text

SIDES = (("a", PALETTE[0]), ("b", PALETTE[1]))     # each run's key in the dicts and its colour
PARTED = COLOR["collapse"]
MAX_POINTS = 2000           # loss curves: at most this many points each (min/max kept, as timeline.py)
LABEL_W, PLOT_W, RATIO_W, ROW_H, TOP = 260, 600, 120, 20, 44
LABEL_CHARS = 34            # about what fits in LABEL_W at the label's font size


def run_legend(label_a: str, label_b: str) -> str:
    """The two runs' names in their colours."""
    return legend([(f"A: {label_a}", SIDES[0][1]), (f"B: {label_b}", SIDES[1][1])])


def flow_overlay(flow: list[dict], label_a: str, label_b: str) -> str:
    """The chart of the gradient norm arriving at each aligned site, A and B overlaid."""
    logs = [math.log10(v) for row in flow for key, _ in SIDES if (v := positive(row.get(key))) is not None]
    width, height = LABEL_W + PLOT_W + RATIO_W, TOP + len(flow) * ROW_H + 12
    lo, hi = decade_range(logs) if logs else (-1, 1)
    x = Scale(lo, hi, LABEL_W, LABEL_W + PLOT_W)
    first = next((i for i, row in enumerate(flow) if row.get("parted")), None)
    out = [svg_open("diff-flow", width, height,
                    f"gradient norm per aligned site, loss to input, log scale: A {label_a}, B {label_b}")]
    out.extend(_flow_axis(x, lo, hi, height))
    for i, row in enumerate(flow):
        out.extend(_flow_row(row, TOP + i * ROW_H, width, i == first))
    for key, color in SIDES:
        out.extend(_flow_line(flow, key, color, x))
    out.append("</svg>")
    return "".join(out)


def _flow_axis(x: Scale, lo: int, hi: int, height: int) -> list[str]:
    return flow_axis(x, lo, hi, height, TOP, LABEL_W, PLOT_W, "B / A")


def _flow_row(row: dict, y: float, width: int, first: bool) -> list[str]:
    """A site's label, hover text, its B/A ratio, and a tint where A and B part."""
    label = str(row.get("label") or "")
    a, b = row.get("a"), row.get("b")
    ratio = b / a if positive(a) is not None and finite(b) is not None else None
    tip = f"{label}: A {value_text(a)}, B {value_text(b)}" + (", parted" if row.get("parted") else "")
    cls = "row parted" if row.get("parted") else "row"
    out = [f'<g class="{cls}"><title>{esc(tip)}</title>']
    if row.get("parted"):
        out.append(f'<rect x="0" y="{coord(y)}" width="{width}" height="{ROW_H}" fill="{PARTED}" '
                   f'fill-opacity="{0.16 if first else 0.06}"/>')
    mark = "◆ " if first else ""
    out.append(svg_text(LABEL_W - 8, y + ROW_H * 0.7, mark + ellipsize(label, LABEL_CHARS), "label", "end",
                        extra=f' fill="{PARTED}"' if first else ""))
    if ratio is not None:
        out.append(svg_text(LABEL_W + PLOT_W + 14, y + ROW_H * 0.7, f"×{value_text(ratio)}", "gain"))
    out.append("</g>")
    return out


def _flow_line(flow: list[dict], key: str, color: str, x: Scale) -> list[str]:
    """One run: a polyline through its sites' norms (split where a site has none), a dot at each."""
    out = [f'<g class="series run-{key}">']
    run: list[tuple[float, float]] = []
    for i, row in enumerate(flow + [{}]):
        v = positive(row.get(key))
        if v is not None:
            run.append((x(math.log10(v)), TOP + i * ROW_H + ROW_H / 2))
            continue
        if len(run) > 1:
            points = " ".join(f"{coord(px)},{coord(py)}" for px, py in run)
            out.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.8"/>')
        out.extend(f'<circle cx="{coord(px)}" cy="{coord(py)}" r="2.6" fill="{color}"/>' for px, py in run)
        run = []
    out.append("</g>")
    return out


def loss_overlay(curve: dict, label_a: str, label_b: str) -> str:
    """One optimizer's loss per step, A and B overlaid, ▼ at `parted_at`."""
    series = []
    for (key, color), label in zip(SIDES, (label_a, label_b)):
        points = [(float(step), finite(v)) for step, v in enumerate(curve.get(key) or [])]
        series.append((f"{key.upper()}: {label}", spread(points, MAX_POINTS), color))
    values = [v for _, pts, _ in series for _, v in pts if v is not None]
    log_y = bool(values) and min(values) > 0 and max(values) / min(values) > 30
    parted = curve.get("parted_at")
    markers = []
    if isinstance(parted, int) and not isinstance(parted, bool):
        markers.append((float(parted), PARTED, f"step {parted}: B parts from A"))
    return line_chart("diff-loss", f"loss per step of optimizer {curve.get('optimizer', 0)}, A and B",
                      series, log_y=log_y, x_label="step", y_label="loss" + (" (log)" if log_y else ""),
                      markers=markers)
