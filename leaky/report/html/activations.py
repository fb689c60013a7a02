"""The Activations section: one card per activation site, with its histogram.

Two kinds of histogram come from the report (`activations[].histogram.kind`), each drawn
by its own entry in HISTOGRAMS:

- `log10_derivative_share` (sigmoid, tanh): how many unit-samples had each local
  derivative, as log10 of its share of the maximum; the flat region below `flat_below`
  is shaded and its bars are red.
- `fire_rate` (the ReLU family): how many units fired on each share of the samples; the
  first bin is shaded, and a red `never` bar counts the units that never fired.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from leaky.report.format import module_label
from leaky.report.html.svg import COLOR, Scale, coord, decade, nice_ticks, svg_open, svg_text, tick_label
from leaky.report.html.values import esc, finite, share_text, source_text, value_text

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 340, 170, 40, 18, 16, 36


def activations_html(acts: list[dict]) -> str:
    if not acts:
        return ""
    return (f'<section id="activations"><h2>Activations</h2><p class="lede">Per activation site. '
            f'Sigmoid/tanh: how many unit-samples had each local derivative (log10 of its share of the '
            f'maximum). ReLU family: how many units fired on each share of the samples.</p>'
            f'<div class="grid">{"".join(activation_card(a) for a in acts)}</div></section>')


def activation_card(act: dict) -> str:
    family = act.get("family") or ""
    short, full = source_text(act.get("source"))
    facts = [f"{esc(value_text(act.get('units')))} units × {esc(value_text(act.get('samples_per_unit')))} samples"]
    if act.get("dead_share") is not None:
        facts.append(f"dead {esc(share_text(act.get('dead_share')))}")
    if act.get("flat_share") is not None:
        facts.append(f"flat {esc(share_text(act.get('flat_share')))}")
    if act.get("median_local_derivative_share") is not None:
        facts.append(f"median derivative {esc(value_text(act.get('median_local_derivative_share')))} of max")
    if act.get("peaked_share") is not None:
        facts.append(f"peaked {esc(share_text(act.get('peaked_share')))}")
    head = " · ".join(x for x in (esc(module_label(act.get("module"))), esc(act.get("op") or family)) if x)
    file = f'<div class="file" title="{esc(full)}">{esc(short)}</div>' if short else ""
    return (f'<div class="card act"><div class="card-head">{head}</div>{file}'
            f'<div class="facts">{" · ".join(facts)}</div>{histogram_chart(act)}</div>')


@dataclass(frozen=True)
class Plot:
    """A histogram laid out: its bins and the data-to-pixel maps."""

    hist: dict
    edges: list[float]
    counts: list[float]
    never: float | None
    plot_l: float           # where the bins start (right of the `never` bar, if any)
    x: Scale
    y: Scale


class Histogram:
    """A histogram of values on a plain axis; the kinds below add their shading and labels."""

    never_w = 0             # room left of the bins for a `never` bar

    def never(self, hist: dict) -> float | None:
        return None

    def shade(self, p: Plot) -> list[str]:
        return []

    def bar(self, p: Plot, i: int) -> tuple[bool, str]:
        """(drawn red, hover text) of bin i."""
        return False, f"[{p.edges[i]:g}, {p.edges[i + 1]:g})"

    def after_bars(self, p: Plot) -> list[str]:
        return []

    def x_axis(self, p: Plot) -> list[str]:
        return [svg_text(p.x(t), HEIGHT - BOTTOM + 13, tick_label(t), "tick", "middle")
                for t in nice_ticks(p.edges[0], p.edges[-1], 4)]

    def note(self, p: Plot) -> str:
        return ""


class DerivativeShare(Histogram):
    """log10 of the local derivative over its maximum; below `flat_below` is the flat region."""

    def _flat_below(self, p: Plot) -> float | None:
        return finite(p.hist.get("flat_below"))

    def _shaded(self, p: Plot) -> bool:
        fb = self._flat_below(p)
        return fb is not None and fb > p.edges[0]

    def shade(self, p: Plot) -> list[str]:
        if not self._shaded(p):
            return []
        x1 = p.x(min(self._flat_below(p), p.edges[-1]))
        return [f'<rect x="{coord(p.plot_l)}" y="{TOP}" width="{coord(x1 - p.plot_l)}" '
                f'height="{HEIGHT - BOTTOM - TOP}" fill="{COLOR["flat"]}"/>',
                svg_text(x1 - 3, TOP + 10, "flat region", "note", "end")]

    def bar(self, p: Plot, i: int) -> tuple[bool, str]:
        fb = self._flat_below(p)
        return fb is not None and p.edges[i + 1] <= fb, f"log10 share in [{p.edges[i]:g}, {p.edges[i + 1]:g})"

    def x_axis(self, p: Plot) -> list[str]:
        span = p.edges[-1] - p.edges[0]
        stride = next(s for s in (1, 2, 4, 5, 10, 20, 50, 100, 10**9) if span / s <= 5)
        out, k = [], math.ceil(p.edges[0] / stride) * stride
        while k <= p.edges[-1]:
            out.append(svg_text(p.x(k), HEIGHT - BOTTOM + 13, decade(int(k)), "tick", "middle"))
            k += stride
        out.append(svg_text(_middle(p), HEIGHT - 4, "local derivative / its max", "axis-label", "middle"))
        return out

    def note(self, p: Plot) -> str:
        if not self._shaded(p):
            return ""
        fb = self._flat_below(p)
        flat = f"derivative below {decade(int(fb)) if fb == int(fb) else fb} of its max"
        return f'<div class="note">shaded: flat region, {esc(flat)}</div>'


class FireRate(Histogram):
    """The share of samples each unit fired on; units that never fired get their own bar."""

    never_w = 46

    def never(self, hist: dict) -> float | None:
        return finite(hist.get("never"))

    def shade(self, p: Plot) -> list[str]:
        if len(p.edges) <= 1:
            return []
        return [f'<rect x="{coord(p.plot_l)}" y="{TOP}" width="{coord(p.x(p.edges[1]) - p.plot_l)}" '
                f'height="{HEIGHT - BOTTOM - TOP}" fill="{COLOR["flat"]}"/>']

    def bar(self, p: Plot, i: int) -> tuple[bool, str]:
        return i == 0, f"fired on {p.edges[i]:.0%}–{p.edges[i + 1]:.0%} of samples"

    def after_bars(self, p: Plot) -> list[str]:
        out = []
        n = p.never or 0.0
        if n > 0:
            h = max(1.0, p.y(0) - p.y(n))
            out.append(f'<rect x="{LEFT + 6}" y="{coord(p.y(0) - h)}" width="{self.never_w - 22}" '
                       f'height="{coord(h)}" fill="{COLOR["collapse"]}"><title>never fired (dead): '
                       f'{esc(value_text(n))}</title></rect>')
        out.append(svg_text(LEFT + 6 + (self.never_w - 22) / 2, HEIGHT - BOTTOM + 13, "never", "tick", "middle"))
        return out

    def x_axis(self, p: Plot) -> list[str]:
        out = [svg_text(p.x(t), HEIGHT - BOTTOM + 13, f"{t:.0%}", "tick", "middle")
               for t in (0.0, 0.25, 0.5, 0.75, 1.0) if p.edges[0] <= t <= p.edges[-1]]
        out.append(svg_text(_middle(p), HEIGHT - 4, "share of samples a unit fired on", "axis-label", "middle"))
        return out

    def note(self, p: Plot) -> str:
        if len(p.edges) <= 1:
            return ""
        return (f'<div class="note">shaded: fires on under {p.edges[1]:.0%} of samples; '
                f'“never”: units that never fired</div>')


HISTOGRAMS: dict[str, Histogram] = {"log10_derivative_share": DerivativeShare(), "fire_rate": FireRate()}
PLAIN = Histogram()


def _middle(p: Plot) -> float:
    return (p.plot_l + WIDTH - RIGHT) / 2


def histogram_chart(act: dict) -> str:
    hist = act.get("histogram")
    if not isinstance(hist, dict):
        return '<p class="none">no histogram recorded</p>'
    edges = [finite(v) for v in hist.get("edges") or []]
    counts = [finite(v) or 0.0 for v in hist.get("counts") or []]
    if len(edges) != len(counts) + 1 or not counts or any(e is None for e in edges):
        return '<p class="none">no histogram recorded</p>'
    kind = HISTOGRAMS.get(hist.get("kind"), PLAIN) if isinstance(hist.get("kind"), str) else PLAIN
    never = kind.never(hist)
    plot_l = LEFT + kind.never_w
    peak = max(counts + [never or 0.0]) or 1.0
    p = Plot(hist, edges, counts, never, plot_l, Scale(edges[0], edges[-1], plot_l, WIDTH - RIGHT),
             Scale(0, peak, HEIGHT - BOTTOM, TOP))
    out = [svg_open("hist", WIDTH, HEIGHT, f"histogram of {module_label(act.get('module'))}")]
    out.extend(kind.shade(p))
    out.extend(_bars(kind, p))
    out.extend(kind.after_bars(p))
    out.append(f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" '
               f'stroke="{COLOR["axis"]}"/>')
    out.extend(svg_text(LEFT - 4, p.y(t) + 3, tick_label(t), "tick", "end") for t in nice_ticks(0, peak, 3))
    out.extend(kind.x_axis(p))
    out.append("</svg>")
    out.append(kind.note(p))
    return "".join(out)


def _bars(kind: Histogram, p: Plot) -> list[str]:
    out = []
    for i, c in enumerate(p.counts):
        x0, x1 = p.x(p.edges[i]), p.x(p.edges[i + 1])
        bad, what = kind.bar(p, i)
        color = COLOR["collapse"] if bad else COLOR["ok"]
        if c > 0:
            h = max(1.0, p.y(0) - p.y(c))
            out.append(f'<rect x="{coord(x0 + 0.5)}" y="{coord(p.y(0) - h)}" '
                       f'width="{coord(max(0.8, x1 - x0 - 1))}" height="{coord(h)}" fill="{color}">'
                       f'<title>{esc(what)}: {esc(value_text(c))}</title></rect>')
    return out
