"""The layer × step heatmap of a watched run: the gradient norm arriving at each module
(rows, from the loss to the input) at each sampled step (columns), on a log10 colour scale
(viridis) with its colour bar; grey where nothing was measured.
"""
from __future__ import annotations

import math

from leaky.report.format import ellipsize, module_label
from leaky.report.html.svg import Scale, coord, decade, decade_range, decade_ticks, svg_open, svg_text, viridis
from leaky.report.html.values import esc, value_text

HEATMAP_CELL_TITLES = 6000  # up to this many heatmap cells get their own hover text
LABEL_W, TOP, ROW_H = 210, 14, 16
MISSING = "#e8e8ec"
COLOUR_BAR_STEPS = 24


def heatmap(modules: list[str], steps: list[int], cells: dict[tuple[str, int], float | None]) -> str:
    """`cells`: (module, step) -> grad norm (None: not measured)."""
    logs = [math.log10(v) for v in cells.values() if v is not None and math.isfinite(v) and v > 0]
    cell_w = max(3.0, min(60.0, 660 / max(1, len(steps))))
    width = LABEL_W + cell_w * len(steps) + 90
    height = TOP + ROW_H * len(modules) + 34
    out = [svg_open("heatmap", width, height, "gradient norm per layer and step, log colour scale")]
    lo, hi = decade_range(logs) if logs else (-1, 1)
    per_cell = len(modules) * len(steps) <= HEATMAP_CELL_TITLES   # hover text per cell, or per row
    for r, name in enumerate(modules):
        out.extend(_row(name, TOP + r * ROW_H, steps, cells, cell_w, lo, hi, per_cell))
    stride = max(1, math.ceil(len(steps) / 12))
    for c in range(0, len(steps), stride):
        out.append(svg_text(LABEL_W + (c + 0.5) * cell_w, height - 18, str(steps[c]), "tick", "middle"))
    out.append(svg_text(LABEL_W + cell_w * len(steps) / 2, height - 4, "step", "axis-label", "middle"))
    out.extend(_colour_bar(width - 70, TOP, max(60, ROW_H * len(modules)), lo, hi))
    out.append("</svg>")
    return "".join(out)


def _row(name: str, y: int, steps: list[int], cells: dict, cell_w: float, lo: int, hi: int,
         per_cell: bool) -> list[str]:
    label = module_label(name)
    out = ['<g class="hrow">' + ("" if per_cell else f"<title>{esc(label)}</title>")]
    out.append(svg_text(LABEL_W - 6, y + ROW_H * 0.72, ellipsize(label, 27), "label", "end"))
    for c, step in enumerate(steps):
        v = cells.get((name, step))
        if v is not None and math.isfinite(v) and v > 0:
            fill = viridis((math.log10(v) - lo) / (hi - lo))
        else:
            fill = MISSING
        rect = (f'<rect x="{coord(LABEL_W + c * cell_w)}" y="{y}" width="{coord(cell_w + 0.2)}" '
                f'height="{ROW_H - 1}" fill="{fill}"')
        tip = f"<title>{esc(label)} · step {step}: {esc(value_text(v))}</title>" if per_cell else ""
        out.append(f"{rect}>{tip}</rect>" if tip else f"{rect}/>")
    out.append("</g>")
    return out


def _colour_bar(bx: float, by: float, bh: float, lo: int, hi: int) -> list[str]:
    out = [f'<rect x="{coord(bx)}" y="{coord(by + bh - (i + 1) * bh / COLOUR_BAR_STEPS)}" width="12" '
           f'height="{coord(bh / COLOUR_BAR_STEPS + 0.5)}" fill="{viridis(i / (COLOUR_BAR_STEPS - 1))}"/>'
           for i in range(COLOUR_BAR_STEPS)]
    cb = Scale(lo, hi, by + bh, by)
    out.extend(svg_text(bx + 16, cb(k) + 3, decade(k), "tick") for k in decade_ticks(lo, hi, 6))
    return out
