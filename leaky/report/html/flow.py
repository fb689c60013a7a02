"""The Gradient flow section: the gradient norm arriving at each module, from the loss
(top) to the input (bottom), on a log scale, with the gain through each module beside it.

The gain is the norm leaving toward the input over the norm arriving. A module with a gain
below COLLAPSE (the gradient collapses there) is drawn red, above EXPLOSION purple, and so
is the line joining the bar ends where it drops or jumps.
"""
from __future__ import annotations

import math
from typing import Any

from leaky.report.format import ellipsize, module_label
from leaky.report.html.svg import COLOR, Scale, coord, decade, decade_range, decade_ticks, svg_open, svg_text, swatch
from leaky.report.html.values import as_float, esc, positive, share_text, value_text

# Gain thresholds of the gradient-flow picture: below COLLAPSE a module passes on less
# than a tenth of the gradient it receives; above EXPLOSION it multiplies it by ten.
COLLAPSE, EXPLOSION = 0.1, 10.0
LABEL_W, BAR_W, GAIN_W, ROW_H, TOP = 250, 560, 190, 20, 44
LABEL_CHARS = 32            # about what fits in LABEL_W at the label's font size


def flow_html(modules: list[dict]) -> str:
    if not modules:
        return ""
    legend = (f'<p class="legend">{swatch(COLOR["collapse"])}gain &lt; {COLLAPSE:g}: the gradient collapses '
              f'here {swatch(COLOR["explosion"])}gain &gt; {EXPLOSION:g}: it explodes here '
              f'{swatch(COLOR["ok"])}otherwise</p>')
    return (f'<section id="flow"><h2>Gradient flow</h2><p class="lede">Gradient norm arriving at each '
            f'module, from the loss (top) to the input (bottom), log scale; the gain is the norm leaving '
            f'toward the input over the norm arriving. Hover a row for its numbers.</p>{legend}'
            f'<figure class="wide">{flow_chart(modules)}</figure></section>')


def gain_class(gain: Any) -> str:
    """collapse, explosion, ok, or unknown (no gain, or NaN)."""
    g = as_float(gain)
    if g is None or math.isnan(g):
        return "unknown"
    if g < COLLAPSE:
        return "collapse"
    if g > EXPLOSION:
        return "explosion"
    return "ok"


def flow_chart(modules: list[dict]) -> str:
    logs = [math.log10(g) for g in (positive(m.get("grad_norm")) for m in modules) if g is not None]
    width, height = LABEL_W + BAR_W + GAIN_W, TOP + len(modules) * ROW_H + 12
    lo, hi = decade_range(logs) if logs else (-1, 1)
    x = Scale(lo, hi, LABEL_W, LABEL_W + BAR_W)
    out = [svg_open("flow", width, height, "gradient norm per module, loss to input, log scale")]
    out.extend(_axis(x, lo, hi, height))
    out.extend(_path(modules, x))
    for i, m in enumerate(modules):
        out.extend(_row(m, TOP + i * ROW_H, x, width))
    out.append("</svg>")
    return "".join(out)


def _axis(x: Scale, lo: int, hi: int, height: int) -> list[str]:
    """Decade grid lines and labels, and the three column headings."""
    out = []
    for k in decade_ticks(lo, hi):
        out.append(f'<line x1="{coord(x(k))}" y1="{TOP - 6}" x2="{coord(x(k))}" y2="{height - 8}" '
                   f'stroke="{COLOR["grid"]}"/>')
        out.append(svg_text(x(k), TOP - 10, decade(k), "tick", "middle"))
    out.append(svg_text(LABEL_W - 8, 12, "loss end ↓ input end", "axis-label", "end"))
    out.append(svg_text(LABEL_W + BAR_W / 2, 12, "gradient norm arriving (log scale)", "axis-label", "middle"))
    out.append(svg_text(LABEL_W + BAR_W + 14, 12, "gain through it", "axis-label"))
    return out


def _path(modules: list[dict], x: Scale) -> list[str]:
    """The path of the signal through the bar ends, under the bars, coloured by the gain."""
    ends = [None if positive(m.get("grad_norm")) is None
            else (x(math.log10(positive(m.get("grad_norm")))), TOP + i * ROW_H + ROW_H / 2)
            for i, m in enumerate(modules)]
    out = []
    for i in range(len(ends) - 1):
        a, b = ends[i], ends[i + 1]
        if a is None or b is None:
            continue
        cls = gain_class(modules[i].get("gain"))
        color = COLOR[cls] if cls in ("collapse", "explosion") else "#1f3b5c"
        wid = 2.5 if cls in ("collapse", "explosion") else 1
        out.append(f'<line x1="{coord(a[0])}" y1="{coord(a[1])}" x2="{coord(b[0])}" y2="{coord(b[1])}" '
                   f'stroke="{color}" stroke-width="{wid}"/>')
    return out


def _row(m: dict, y: float, x: Scale, width: int) -> list[str]:
    """One module: its label, its bar (or why there is none) and its gain, with hover text."""
    cls = gain_class(m.get("gain"))
    name = module_label(m.get("module"))
    kind = m.get("type") or ""
    tip = (f"{name}{f' ({kind})' if kind else ''}: gradient norm in {value_text(m.get('grad_norm'))}, "
           f"gain {value_text(m.get('gain'))}, zeroed {share_text(m.get('zeroed_share'))}, "
           f"dead {share_text(m.get('dead_share'))}, saturated {share_text(m.get('saturated_share'))}")
    out = [f'<g class="row {cls}"><title>{esc(tip)}</title>']
    if cls in ("collapse", "explosion"):
        out.append(f'<rect x="0" y="{y}" width="{width}" height="{ROW_H}" fill="{COLOR[cls]}" '
                   f'fill-opacity="0.08"/>')
    label = esc(ellipsize(name, LABEL_CHARS))
    if kind and kind != name and len(name) + len(kind) < LABEL_CHARS:
        label += f' <tspan class="type">{esc(kind)}</tspan>'
    out.append(f'<text x="{LABEL_W - 8}" y="{coord(y + ROW_H * 0.7)}" class="label" text-anchor="end">'
               f'{label}</text>')
    out.append(_bar(m, y, x, cls))
    gain = m.get("gain")
    if gain is not None:
        mark = {"collapse": " ▼ collapse", "explosion": " ▲ explosion"}.get(cls, "")
        fill = COLOR[cls] if cls != "ok" else COLOR["axis"]
        out.append(svg_text(LABEL_W + BAR_W + 14, y + ROW_H * 0.7, f"×{value_text(gain)}{mark}", f"gain {cls}",
                            extra=f' fill="{fill}"'))
    out.append("</g>")
    return out


def _bar(m: dict, y: float, x: Scale, cls: str) -> str:
    g = positive(m.get("grad_norm"))
    if g is not None:
        end = x(math.log10(g))
        return (f'<rect x="{LABEL_W}" y="{y + 3}" width="{coord(max(1.0, end - LABEL_W))}" '
                f'height="{ROW_H - 6}" rx="2" fill="{COLOR[cls] if cls != "unknown" else COLOR["ok"]}"/>')
    raw = m.get("grad_norm")
    what = "no gradient measured" if raw is None else f"grad norm {value_text(raw)}"
    return svg_text(LABEL_W + 4, y + ROW_H * 0.7, what, "missing")
