"""HTML view: the report (and, for watched runs, the stored run) as one self-contained page.

    from leaky.report.html import render_html, run_payload, write_html

    page = render_html(audit.report.to_dict())                       # an audit
    with Store("leaky-runs.db") as store:                            # a watched run
        page = render_html(watch.report.to_dict(), run_payload(store, watch.run_id))
    write_html("report.html", page)

The page renders what the JSON report (`leaky/report-v1`) and the run store already hold
and computes nothing new: findings (with a few lines of the user's source around each
one), the gradient flow from the loss to the input on a log scale, activation histograms,
recurrent time profiles, and for watched runs a layer × step heatmap, dead units and
update ratios over time and the loss curve with each finding marked where it appeared.

Charts are inline SVG written here; CSS and the few lines of JavaScript (open the
collapsed tables when printing) are inline too: no network, no fonts, no CDN. Every
string that comes from the user's program goes through `html.escape`; the embedded JSON
copy of the data escapes `<`, `>` and `&`. See docs/html-report.md.
"""
from __future__ import annotations

import datetime
import html as _html
import json
import math
import os
from collections import OrderedDict, defaultdict
from typing import Any

from leaky.report.format import num

__all__ = ["render_html", "run_payload", "write_html"]

# Gain thresholds of the gradient-flow picture: below COLLAPSE a module passes on less
# than a tenth of the gradient it receives; above EXPLOSION it multiplies it by ten.
COLLAPSE, EXPLOSION = 0.1, 10.0
SOURCE_CONTEXT = 3          # lines shown above and below a finding's line
MAX_COLUMNS = 200           # heatmap / per-layer series: at most this many sampled steps
HEATMAP_CELL_TITLES = 6000  # up to this many heatmap cells get their own hover text
MAX_POINTS = 2000           # loss and gradient-norm curves: at most this many points (min/max kept)

_C = {"collapse": "#d62728", "explosion": "#8e44ad", "ok": "#4e79a7", "unknown": "#9aa0a6",
      "flat": "#fde2e1", "grid": "#e4e6eb", "axis": "#5f6368", "error": "#c62828",
      "warning": "#b26a00", "info": "#1565c0"}
_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac")
_VIRIDIS = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
_SUPER = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


# -- small helpers -------------------------------------------------------------------------
def _e(value: Any) -> str:
    """Escape anything for HTML text and attribute values (quotes included)."""
    return _html.escape(str(value), quote=True)


def _f(value: Any) -> float | None:
    """A float from a report value (numbers, or the strings 'nan', 'inf', '-inf'); else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def _pos(value: Any) -> float | None:
    """A finite positive float (plottable on a log scale), else None."""
    x = _f(value)
    return x if x is not None and math.isfinite(x) and x > 0 else None


def _fin(value: Any) -> float | None:
    x = _f(value)
    return x if x is not None and math.isfinite(x) else None


def _num(value: Any) -> str:
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


def _pct(value: Any) -> str:
    x = _fin(value)
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _decade(k: int) -> str:
    """10^k as a label: 1, 10, 10⁻³."""
    if k == 0:
        return "1"
    if k == 1:
        return "10"
    return "10" + str(k).translate(_SUPER)


def _short_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _ellipsize(text: str, limit: int) -> str:
    """Keep the end of long dotted names: the last components say the most."""
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def _module_label(name: Any) -> str:
    if name is None:
        return "(no module)"
    if name == "":
        return "<root>"
    return str(name)


def _gain_class(gain: Any) -> str:
    g = _f(gain)
    if g is None or math.isnan(g):
        return "unknown"
    if g < COLLAPSE:
        return "collapse"
    if g > EXPLOSION:
        return "explosion"
    return "ok"


def _fmt(x: float) -> str:
    """Coordinates: short, stable."""
    return f"{x:.1f}".rstrip("0").rstrip(".") if x == x else "0"


class _Scale:
    """Linear map from a data interval onto a pixel interval."""

    def __init__(self, d0: float, d1: float, r0: float, r1: float):
        if d1 == d0:
            d0, d1 = d0 - 0.5, d1 + 0.5
        self.d0, self.d1, self.r0, self.r1 = d0, d1, r0, r1

    def __call__(self, v: float) -> float:
        return self.r0 + (v - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
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


def _tick_label(v: float) -> str:
    if v == int(v) and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.3g}"


def _decade_range(logs: list[float]) -> tuple[int, int]:
    """Whole decades around the values; a minimum exactly on a decade gets one more below,
    so that its bar is not empty."""
    lo = math.floor(min(logs) + 1e-9)
    if min(logs) - lo < 0.05:
        lo -= 1
    hi = math.ceil(max(logs) - 1e-9)
    if hi <= lo:
        hi = lo + 1
    return lo, hi


def _decade_ticks(lo: int, hi: int, most: int = 10) -> list[int]:
    stride = max(1, math.ceil((hi - lo) / most))
    return list(range(lo, hi + 1, stride))


def _viridis(t: float) -> str:
    t = min(1.0, max(0.0, t)) * (len(_VIRIDIS) - 1)
    i = min(int(t), len(_VIRIDIS) - 2)
    a, b, w = _VIRIDIS[i], _VIRIDIS[i + 1], t - i
    return "#%02x%02x%02x" % tuple(round(a[k] + (b[k] - a[k]) * w) for k in range(3))


def _svg_open(kind: str, width: float, height: float, label: str) -> str:
    return (f'<svg class="chart {kind}" role="img" aria-label="{_e(label)}" width="{_fmt(width)}" '
            f'height="{_fmt(height)}" viewBox="0 0 {_fmt(width)} {_fmt(height)}">')


def _text(x: float, y: float, text: str, cls: str = "", anchor: str = "start", extra: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    a = f' text-anchor="{anchor}"' if anchor != "start" else ""
    return f'<text x="{_fmt(x)}" y="{_fmt(y)}"{c}{a}{extra}>{_e(text)}</text>'


def _spread(points: list[tuple[float, float | None]], most: int) -> list[tuple[float, float | None]]:
    """At most ~`most` points of a long series for drawing: per bucket, its lowest and highest
    value (in step order), so spikes and drops stay visible; gaps (None) are kept."""
    if len(points) <= most:
        return points
    size = math.ceil(len(points) / (most / 2))
    kept: list[tuple[float, float | None]] = []
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


def _pick_columns(steps: list[int], most: int = MAX_COLUMNS) -> list[int]:
    if len(steps) <= most:
        return steps
    last = len(steps) - 1
    return [steps[round(i * last / (most - 1))] for i in range(most)]   # first and last kept


# -- source snippets -----------------------------------------------------------------------
class _Sources:
    """Lines of the user's files around a finding; unreadable files give no snippet."""

    def __init__(self) -> None:
        self._cache: dict[str, list[str] | None] = {}

    def lines(self, path: str, upto: int) -> list[str] | None:
        cached = self._cache.get(path)
        if cached is not None and len(cached) >= upto:
            return cached
        if path in self._cache and cached is None:
            return None
        try:
            if not os.path.isfile(path):
                raise OSError
            out = []
            with open(path, encoding="utf-8", errors="replace") as fh:
                for i, line in enumerate(fh):
                    if i >= upto:
                        break
                    out.append(line.rstrip("\r\n").expandtabs(4))
        except (OSError, ValueError):
            self._cache[path] = None
            return None
        self._cache[path] = out
        return out

    def snippet(self, source: Any) -> str:
        if not isinstance(source, dict) or not source.get("file"):
            return ""
        line = source.get("line")
        if not isinstance(line, int) or isinstance(line, bool) or line < 1:
            return ""
        lines = self.lines(str(source["file"]), line + SOURCE_CONTEXT)
        if not lines or len(lines) < line:
            return ""
        first = max(1, line - SOURCE_CONTEXT)
        width = len(str(min(len(lines), line + SOURCE_CONTEXT)))
        rows = []
        for n in range(first, min(len(lines), line + SOURCE_CONTEXT) + 1):
            text = f'<span class="ln">{str(n).rjust(width)}</span> {_e(lines[n - 1])}'
            rows.append(f'<span class="hl">{text}</span>' if n == line else text)
        return '<pre class="src">' + "\n".join(rows) + "</pre>"


# -- findings -----------------------------------------------------------------------------
def _source_text(source: Any) -> tuple[str, str]:
    """(short file:line, full path) of a source dict."""
    if not isinstance(source, dict) or not source.get("file"):
        return "", ""
    full = str(source["file"])
    line = source.get("line")
    short = _short_path(full) + (f":{line}" if line is not None else "")
    return short, full


def _finding_key(f: dict) -> tuple:
    src = f.get("source") or {}
    return (f.get("code"), f.get("module"), f.get("op") or None, src.get("file") or None, src.get("line"))


def _evidence_value(value: Any, depth: int = 0) -> str:
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "<br>".join(f'<span class="k">{_e(k)}</span> {_evidence_value(v, depth + 1)}'
                           for k, v in value.items())
    if isinstance(value, (list, tuple)):
        items = list(value)
        if items and all(isinstance(v, dict) for v in items) and depth == 0:
            keys: list[str] = []
            for item in items:
                keys.extend(k for k in item if k not in keys)
            shown = items[:12]
            head = "".join(f"<th>{_e(k)}</th>" for k in keys)
            body = "".join("<tr>" + "".join(f"<td>{_evidence_value(item.get(k), depth + 1)}</td>" for k in keys)
                           + "</tr>" for item in shown)
            more = (f'<div class="more">… {len(items) - len(shown)} more</div>'
                    if len(items) > len(shown) else "")
            return f'<table class="sub"><tr>{head}</tr>{body}</table>{more}'
        if len(items) <= 8:
            return "[" + ", ".join(_evidence_value(v, depth + 1) for v in items) + "]"
        full = ", ".join(_num(v) if not isinstance(v, (dict, list)) else json.dumps(v, default=str)
                         for v in items)
        return (f'<span title="{_e(full)}">[' + ", ".join(_evidence_value(v, depth + 1) for v in items[:6])
                + f', … {len(items)} values]</span>')
    return _e(_num(value))


def _evidence_table(evidence: Any) -> str:
    if not isinstance(evidence, dict) or not evidence:
        return ""
    rows = "".join(f'<tr><th scope="row">{_e(k)}</th><td>{_evidence_value(v)}</td></tr>'
                   for k, v in evidence.items())
    return f'<table class="evidence"><caption>evidence</caption>{rows}</table>'


def _finding_section(i: int, f: dict, sources: _Sources, seen: dict | None) -> str:
    severity = str(f.get("severity") or "info")
    sev_cls = severity if severity in ("error", "warning", "info") else "info"
    where = []
    if "module" in f and f.get("module") is not None:
        where.append(f'<span class="mod">{_e(_module_label(f.get("module")))}</span>')
    if f.get("op"):
        where.append(f'<span class="op">{_e(f["op"])}</span>')
    short, full = _source_text(f.get("source"))
    if short:
        where.append(f'<span class="file" title="{_e(full)}">{_e(short)}</span>')
    if f.get("step") is not None:
        where.append(f"step {_e(f['step'])}")
    if seen is not None:
        first, last = seen.get("first_step"), seen.get("last_step")
        if first is not None:
            span = f"first seen at step {first}"
            if last not in (None, first):
                span += f", last at step {last}"
            where.append(_e(span))
    snippet = sources.snippet(f.get("source"))
    evidence = _evidence_table(f.get("evidence"))
    body = ""
    if snippet or evidence:
        body = f'<div class="cols">{f"<div>{snippet}</div>" if snippet else ""}' \
               f'{f"<div>{evidence}</div>" if evidence else ""}</div>'
    name = f.get("name") or ""
    code = f.get("code") or ""
    return (f'<section class="finding sev-{sev_cls}" id="finding-{i}" data-code="{_e(code)}" '
            f'data-severity="{_e(severity)}">'
            f'<h3><span class="badge {sev_cls}">{_e(severity.upper())}</span> '
            f'<span class="code">{_e(code)}</span> {_e(name)}</h3>'
            f'<p class="where">{" · ".join(where) or "&lt;model&gt;"}</p>'
            f'<p class="msg">{_e(f.get("message") or "")}</p>{body}'
            f'<p class="fix"><b>Fix</b> {_e(f.get("fix") or "")}</p></section>')


def _findings_html(findings: list[dict], run: dict | None) -> str:
    seen = {}
    if run:
        for stored in run.get("findings") or []:
            seen.setdefault(_finding_key(stored), stored)
    sources = _Sources()
    if not findings:
        return ('<section id="findings"><h2>Findings</h2>'
                '<p class="none">No findings: no leaks found.</p></section>')
    parts = [_finding_section(i + 1, f, sources, seen.get(_finding_key(f)) if run else None)
             for i, f in enumerate(findings)]
    return (f'<section id="findings"><h2>Findings <span class="count">{len(findings)}</span></h2>'
            f'<p class="lede">Most severe first. Each names the module, the op and the line of your code, '
            f'with the numbers behind it and what to change.</p>{"".join(parts)}</section>')


# -- gradient flow ------------------------------------------------------------------------
def _flow_chart(modules: list[dict]) -> str:
    rows = len(modules)
    logs = [math.log10(g) for g in (_pos(m.get("grad_norm")) for m in modules) if g is not None]
    label_w, bar_w, gain_w, row_h, top = 250, 560, 190, 20, 44
    width, height = label_w + bar_w + gain_w, top + rows * row_h + 12
    out = [_svg_open("flow", width, height, "gradient norm per module, loss to input, log scale")]
    if logs:
        lo, hi = _decade_range(logs)
    else:
        lo, hi = -1, 1
    x = _Scale(lo, hi, label_w, label_w + bar_w)
    for k in _decade_ticks(lo, hi):
        out.append(f'<line x1="{_fmt(x(k))}" y1="{top - 6}" x2="{_fmt(x(k))}" y2="{height - 8}" '
                   f'stroke="{_C["grid"]}"/>')
        out.append(_text(x(k), top - 10, _decade(k), "tick", "middle"))
    out.append(_text(label_w - 8, 12, "loss end ↓ input end", "axis-label", "end"))
    out.append(_text(label_w + bar_w / 2, 12, "gradient norm arriving (log scale)", "axis-label", "middle"))
    out.append(_text(label_w + bar_w + 14, 12, "gain through it", "axis-label"))
    ends = [None if _pos(m.get("grad_norm")) is None
            else (x(math.log10(_pos(m.get("grad_norm")))), top + i * row_h + row_h / 2)
            for i, m in enumerate(modules)]
    for i in range(len(ends) - 1):     # the path of the signal, under the bars, coloured by the gain
        a, b = ends[i], ends[i + 1]
        if a is None or b is None:
            continue
        cls = _gain_class(modules[i].get("gain"))
        color = _C[cls] if cls in ("collapse", "explosion") else "#1f3b5c"
        wid = 2.5 if cls in ("collapse", "explosion") else 1
        out.append(f'<line x1="{_fmt(a[0])}" y1="{_fmt(a[1])}" x2="{_fmt(b[0])}" y2="{_fmt(b[1])}" '
                   f'stroke="{color}" stroke-width="{wid}"/>')
    for i, m in enumerate(modules):
        y = top + i * row_h
        cls = _gain_class(m.get("gain"))
        name = _module_label(m.get("module"))
        kind = m.get("type") or ""
        tip = (f"{name}{f' ({kind})' if kind else ''}: gradient norm in {_num(m.get('grad_norm'))}, "
               f"gain {_num(m.get('gain'))}, zeroed {_pct(m.get('zeroed_share'))}, "
               f"dead {_pct(m.get('dead_share'))}, saturated {_pct(m.get('saturated_share'))}")
        out.append(f'<g class="row {cls}"><title>{_e(tip)}</title>')
        if cls in ("collapse", "explosion"):
            out.append(f'<rect x="0" y="{y}" width="{width}" height="{row_h}" fill="{_C[cls]}" '
                       f'fill-opacity="0.08"/>')
        label = _e(_ellipsize(name, 32))     # about what fits in label_w at this font size
        if kind and kind != name and len(name) + len(kind) < 32:
            label += f' <tspan class="type">{_e(kind)}</tspan>'
        out.append(f'<text x="{label_w - 8}" y="{_fmt(y + row_h * 0.7)}" class="label" text-anchor="end">'
                   f'{label}</text>')
        g = _pos(m.get("grad_norm"))
        if g is not None:
            end = x(math.log10(g))
            out.append(f'<rect x="{label_w}" y="{y + 3}" width="{_fmt(max(1.0, end - label_w))}" '
                       f'height="{row_h - 6}" rx="2" fill="{_C[cls] if cls != "unknown" else _C["ok"]}"/>')
        else:
            raw = m.get("grad_norm")
            what = "no gradient measured" if raw is None else f"grad norm {_num(raw)}"
            out.append(_text(label_w + 4, y + row_h * 0.7, what, "missing"))
        gain = m.get("gain")
        if gain is not None:
            mark = {"collapse": " ▼ collapse", "explosion": " ▲ explosion"}.get(cls, "")
            fill = _C[cls] if cls != "ok" else _C["axis"]
            out.append(_text(label_w + bar_w + 14, y + row_h * 0.7, f"×{_num(gain)}{mark}", f"gain {cls}",
                             extra=f' fill="{fill}"'))
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _flow_html(modules: list[dict]) -> str:
    if not modules:
        return ""
    def swatch(color: str) -> str:
        return f'<span class="sw" style="background:{color}"></span>'

    legend = (f'<p class="legend">{swatch(_C["collapse"])}gain &lt; {COLLAPSE:g}: the gradient collapses '
              f'here {swatch(_C["explosion"])}gain &gt; {EXPLOSION:g}: it explodes here '
              f'{swatch(_C["ok"])}otherwise</p>')
    return (f'<section id="flow"><h2>Gradient flow</h2><p class="lede">Gradient norm arriving at each '
            f'module, from the loss (top) to the input (bottom), log scale; the gain is the norm leaving '
            f'toward the input over the norm arriving. Hover a row for its numbers.</p>{legend}'
            f'<figure class="wide">{_flow_chart(modules)}</figure></section>')


# -- activation histograms ----------------------------------------------------------------
def _histogram_chart(act: dict) -> str:
    hist = act.get("histogram")
    if not isinstance(hist, dict):
        return '<p class="none">no histogram recorded</p>'
    edges = [_fin(v) for v in hist.get("edges") or []]
    counts = [_fin(v) or 0.0 for v in hist.get("counts") or []]
    if len(edges) != len(counts) + 1 or not counts or any(e is None for e in edges):
        return '<p class="none">no histogram recorded</p>'
    kind = hist.get("kind")
    never = _fin(hist.get("never")) if kind == "fire_rate" else None
    width, height, left, right, top, bottom = 340, 170, 40, 18, 16, 36
    never_w = 46 if kind == "fire_rate" else 0
    plot_l = left + never_w
    x = _Scale(edges[0], edges[-1], plot_l, width - right)
    peak = max(counts + [never or 0.0]) or 1.0
    y = _Scale(0, peak, height - bottom, top)
    out = [_svg_open("hist", width, height, f"histogram of {_module_label(act.get('module'))}")]
    flat_label = ""
    if kind == "log10_derivative_share":
        fb = _fin(hist.get("flat_below"))
        if fb is not None and fb > edges[0]:
            x1 = x(min(fb, edges[-1]))
            out.append(f'<rect x="{_fmt(plot_l)}" y="{top}" width="{_fmt(x1 - plot_l)}" '
                       f'height="{height - bottom - top}" fill="{_C["flat"]}"/>')
            out.append(_text(x1 - 3, top + 10, "flat region", "note", "end"))
            flat_label = f"derivative below {_decade(int(fb)) if fb == int(fb) else fb} of its max"
    elif kind == "fire_rate" and len(edges) > 1:
        out.append(f'<rect x="{_fmt(plot_l)}" y="{top}" width="{_fmt(x(edges[1]) - plot_l)}" '
                   f'height="{height - bottom - top}" fill="{_C["flat"]}"/>')
    for i, c in enumerate(counts):
        x0, x1 = x(edges[i]), x(edges[i + 1])
        if kind == "log10_derivative_share":
            fb = _fin(hist.get("flat_below"))
            bad = fb is not None and edges[i + 1] <= fb
            what = f"log10 share in [{edges[i]:g}, {edges[i + 1]:g})"
        elif kind == "fire_rate":
            bad = i == 0
            what = f"fired on {edges[i]:.0%}–{edges[i + 1]:.0%} of samples"
        else:
            bad, what = False, f"[{edges[i]:g}, {edges[i + 1]:g})"
        color = _C["collapse"] if bad else _C["ok"]
        if c > 0:
            h = max(1.0, y(0) - y(c))
            out.append(f'<rect x="{_fmt(x0 + 0.5)}" y="{_fmt(y(0) - h)}" width="{_fmt(max(0.8, x1 - x0 - 1))}" '
                       f'height="{_fmt(h)}" fill="{color}"><title>{_e(what)}: {_e(_num(c))}</title></rect>')
    if kind == "fire_rate":
        n = never or 0.0
        if n > 0:
            h = max(1.0, y(0) - y(n))
            out.append(f'<rect x="{left + 6}" y="{_fmt(y(0) - h)}" width="{never_w - 22}" height="{_fmt(h)}" '
                       f'fill="{_C["collapse"]}"><title>never fired (dead): {_e(_num(n))}</title></rect>')
        out.append(_text(left + 6 + (never_w - 22) / 2, height - bottom + 13, "never", "tick", "middle"))
    # axes
    out.append(f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
               f'stroke="{_C["axis"]}"/>')
    for t in _nice_ticks(0, peak, 3):
        out.append(_text(left - 4, y(t) + 3, _tick_label(t), "tick", "end"))
    mid = (plot_l + width - right) / 2
    if kind == "log10_derivative_share":
        span = edges[-1] - edges[0]
        stride = next(s for s in (1, 2, 4, 5, 10, 20, 50, 100, 10**9) if span / s <= 5)
        k = math.ceil(edges[0] / stride) * stride
        while k <= edges[-1]:
            out.append(_text(x(k), height - bottom + 13, _decade(int(k)), "tick", "middle"))
            k += stride
        out.append(_text(mid, height - 4, "local derivative / its max", "axis-label", "middle"))
    elif kind == "fire_rate":
        for t in (0.0, 0.25, 0.5, 0.75, 1.0):
            if edges[0] <= t <= edges[-1]:
                out.append(_text(x(t), height - bottom + 13, f"{t:.0%}", "tick", "middle"))
        out.append(_text(mid, height - 4, "share of samples a unit fired on", "axis-label", "middle"))
    else:
        for t in _nice_ticks(edges[0], edges[-1], 4):
            out.append(_text(x(t), height - bottom + 13, _tick_label(t), "tick", "middle"))
    out.append("</svg>")
    if flat_label:
        out.append(f'<div class="note">shaded: flat region, {_e(flat_label)}</div>')
    elif kind == "fire_rate" and len(edges) > 1:
        out.append(f'<div class="note">shaded: fires on under {edges[1]:.0%} of samples; '
                   f'“never”: units that never fired</div>')
    return "".join(out)


def _activation_card(act: dict) -> str:
    family = act.get("family") or ""
    short, full = _source_text(act.get("source"))
    facts = [f"{_e(_num(act.get('units')))} units × {_e(_num(act.get('samples_per_unit')))} samples"]
    if act.get("dead_share") is not None:
        facts.append(f"dead {_e(_pct(act.get('dead_share')))}")
    if act.get("flat_share") is not None:
        facts.append(f"flat {_e(_pct(act.get('flat_share')))}")
    if act.get("median_local_derivative_share") is not None:
        facts.append(f"median derivative {_e(_num(act.get('median_local_derivative_share')))} of max")
    if act.get("peaked_share") is not None:
        facts.append(f"peaked {_e(_pct(act.get('peaked_share')))}")
    head = " · ".join(x for x in (_e(_module_label(act.get("module"))), _e(act.get("op") or family)) if x)
    file = f'<div class="file" title="{_e(full)}">{_e(short)}</div>' if short else ""
    return (f'<div class="card act"><div class="card-head">{head}</div>{file}'
            f'<div class="facts">{" · ".join(facts)}</div>{_histogram_chart(act)}</div>')


def _activations_html(acts: list[dict]) -> str:
    if not acts:
        return ""
    return (f'<section id="activations"><h2>Activations</h2><p class="lede">Per activation site. '
            f'Sigmoid/tanh: how many unit-samples had each local derivative (log10 of its share of the '
            f'maximum). ReLU family: how many units fired on each share of the samples.</p>'
            f'<div class="grid">{"".join(_activation_card(a) for a in acts)}</div></section>')


# -- line charts ---------------------------------------------------------------------------
def _line_chart(kind: str, label: str, series: list[tuple[str, list[tuple[float, float | None]], str]], *,
                log_y: bool, x_label: str, y_label: str, width: int = 1000, height: int = 260,
                markers: list[tuple[float, str, str]] | None = None, bad_x: list[float] | None = None,
                ref: tuple[float, str] | None = None, y_range: tuple[float, float] | None = None,
                dots: bool = False) -> str:
    left, right, top, bottom = 62, 16, 22, 40
    pts_all = [(px, py) for _, pts, _ in series for px, py in pts if py is not None]
    if log_y:
        pts_all = [(px, py) for px, py in pts_all if py > 0]
    xs = [px for px, _ in pts_all] + [m[0] for m in markers or []] + list(bad_x or [])
    if not xs:
        return '<p class="none">nothing to plot</p>'
    x = _Scale(min(xs), max(xs), left, width - right)
    if log_y:
        logs = [math.log10(py) for _, py in pts_all] + ([math.log10(ref[0])] if ref else [])
        if not logs:
            return '<p class="none">nothing to plot on a log scale</p>'
        lo, hi = _decade_range(logs)
        ys = _Scale(lo, hi, height - bottom, top)
        y = lambda v: ys(math.log10(v))  # noqa: E731
        ticks = [(ys(k), _decade(k)) for k in _decade_ticks(lo, hi, 6)]
    else:
        vals = [py for _, py in pts_all]
        lo_v, hi_v = y_range if y_range else ((min(vals), max(vals)) if vals else (0.0, 1.0))
        if hi_v <= lo_v:
            lo_v, hi_v = lo_v - 0.5, hi_v + 0.5
        y = _Scale(lo_v, hi_v, height - bottom, top)
        ticks = [(y(t), _tick_label(t)) for t in _nice_ticks(lo_v, hi_v, 4)]
    out = [_svg_open(kind, width, height, label)]
    for ty, tl in ticks:
        out.append(f'<line x1="{left}" y1="{_fmt(ty)}" x2="{width - right}" y2="{_fmt(ty)}" '
                   f'stroke="{_C["grid"]}"/>')
        out.append(_text(left - 6, ty + 3, tl, "tick", "end"))
    for t in _nice_ticks(min(xs), max(xs), 8):
        if t == int(t):
            out.append(_text(x(t), height - bottom + 14, _tick_label(t), "tick", "middle"))
    out.append(f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
               f'stroke="{_C["axis"]}"/>')
    out.append(_text((left + width - right) / 2, height - 6, x_label, "axis-label", "middle"))
    out.append(_text(12, top + (height - top - bottom) / 2, y_label, "axis-label", "middle",
                     extra=f' transform="rotate(-90 12 {_fmt(top + (height - top - bottom) / 2)})"'))
    if ref is not None:
        ry = y(ref[0])
        out.append(f'<line x1="{left}" y1="{_fmt(ry)}" x2="{width - right}" y2="{_fmt(ry)}" '
                   f'stroke="{_C["axis"]}" stroke-dasharray="5 4"/>')
        out.append(_text(left + 4, ry - 4, ref[1], "note"))
    for mx, color, tip in markers or []:
        px = x(mx)
        out.append(f'<g class="marker"><title>{_e(tip)}</title><line x1="{_fmt(px)}" y1="{top}" x2="{_fmt(px)}" '
                   f'y2="{height - bottom}" stroke="{color}" stroke-width="1.5" stroke-dasharray="4 3"/>'
                   f'<path d="M{_fmt(px - 5)} {top - 9}h10l-5 8z" fill="{color}"/></g>')
    for bx in bad_x or []:
        px = x(bx)
        out.append(f'<g class="nonfinite"><title>step {_e(_num(bx))}: loss or gradient not finite</title>'
                   f'<text x="{_fmt(px)}" y="{top + 8}" text-anchor="middle" fill="{_C["error"]}">×</text></g>')
    for name, pts, color in series:
        run: list[str] = []
        segments: list[list[str]] = []
        for px, py in pts:
            if py is None or (log_y and py <= 0):
                if run:
                    segments.append(run)
                run = []
                continue
            run.append(f"{_fmt(x(px))},{_fmt(y(py))}")
        if run:
            segments.append(run)
        out.append(f'<g class="series"><title>{_e(name)}</title>')
        for seg in segments:
            if len(seg) == 1 or dots:
                for p in seg:
                    cx, cy = p.split(",")
                    out.append(f'<circle cx="{cx}" cy="{cy}" r="2.2" fill="{color}"/>')
            if len(seg) > 1:
                out.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{color}" '
                           f'stroke-width="1.6"/>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _legend(names: list[tuple[str, str]]) -> str:
    if len(names) < 2:
        return ""
    items = "".join(f'<span class="li"><span class="sw" style="background:{c}"></span>{_e(n)}</span>'
                    for n, c in names[:24])
    more = f'<span class="li">… {len(names) - 24} more (hover a line)</span>' if len(names) > 24 else ""
    return f'<div class="legend">{items}{more}</div>'


# -- recurrences ---------------------------------------------------------------------------
def _recurrences_html(recs: list[dict]) -> str:
    if not recs:
        return ""
    cards = []
    for r in recs:
        profile = r.get("time_profile")
        module = _module_label(r.get("module"))
        head = " · ".join(_e(x) for x in (module, r.get("param") or "", r.get("kind") or ""))
        if r.get("gated"):
            head += " (gated)"
        facts = (f'spectral radius ρ = {_e(_num(r.get("spectral_radius")))} · '
                 f'{_e(_num(r.get("time_steps")))} time steps')
        if isinstance(profile, list) and profile:
            steps = _f(r.get("time_steps"))
            n = len(profile)
            span = (steps - 1) if steps and steps > 1 else (n - 1)
            pts = [((i * span / (n - 1)) if n > 1 else 0.0, _pos(v)) for i, v in enumerate(profile)]
            chart = _line_chart("recurrence", f"gradient norm per time step of {module}",
                                [(f"{module} {r.get('param') or ''}", pts, _C["explosion"])], log_y=True,
                                x_label="time step (t = 0 is the first input)", y_label="gradient norm",
                                height=240, dots=n <= 65)
        else:
            chart = ('<p class="none">no per-time-step profile: the backend runs the whole recurrence as one '
                     'node (e.g. oneDNN LSTM on CPU, cuDNN on GPU)</p>')
        cards.append(f'<div class="card rec"><div class="card-head">{head}</div><div class="facts">{facts}</div>'
                     f'{chart}</div>')
    return (f'<section id="recurrences"><h2>Recurrences</h2><p class="lede">Gradient norm reaching each '
            f'time step, log scale. Rising toward t = 0: exploding through time; falling: vanishing.</p>'
            f'{"".join(cards)}</section>')


# -- run: loss, heatmap, per-layer series -----------------------------------------------------
def _severity_color(sev: Any) -> str:
    return _C.get(str(sev), _C["info"])


def _run_finding_item(f: dict) -> str:
    severity = str(f.get("severity") or "")
    op = f" · {_e(f['op'])}" if f.get("op") else ""
    return (f'<li class="run-finding"><span class="badge {_e(severity)}">{_e(severity.upper())}</span> '
            f'<span class="code">{_e(f.get("code") or "")}</span> {_e(f.get("name") or "")} · '
            f'{_e(_module_label(f.get("module")))}{op}</li>')


def _finding_markers(findings: list[dict], step_key: str) -> tuple[list[tuple[float, str, str]], str]:
    """Vertical markers (one per step, coloured by the worst finding there) and a list under the chart."""
    by_step: dict[int, list[dict]] = OrderedDict()
    for f in findings:
        s = f.get(step_key)
        if isinstance(s, (int, float)) and not isinstance(s, bool):
            by_step.setdefault(int(s), []).append(f)
    rank = {"error": 2, "warning": 1, "info": 0}
    markers, items = [], []
    for step in sorted(by_step):
        group = by_step[step]
        worst = max(group, key=lambda f: rank.get(str(f.get("severity")), 0))
        names = [f"{f.get('code')} {f.get('name')} · {_module_label(f.get('module'))}" for f in group]
        tip = f"step {step}: " + "; ".join(names)
        markers.append((float(step), _severity_color(worst.get("severity")), tip))
        listed = "".join(_run_finding_item(f) for f in group)
        items.append(f'<li><b>step {step}</b><ul>{listed}</ul></li>')
    text = f'<ul class="timeline">{"".join(items)}</ul>' if items else ""
    if len(items) > 8:
        text = (f'<details><summary>Findings by the step they were first seen ({len(items)} steps)</summary>'
                f'{text}</details>')
    return markers, text


def _loss_html(points: list[tuple[int, float | None, float | None, bool]], findings: list[dict],
               step_key: str, origin: str) -> str:
    """points: (step, loss, grad_norm, nonfinite)."""
    if not points:
        return ""
    loss = _spread([(float(s), lo if lo is not None and math.isfinite(lo) else None) for s, lo, _, _ in points],
                   MAX_POINTS)
    norms = _spread([(float(s), gn if gn is not None and math.isfinite(gn) else None) for s, _, gn, _ in points],
                    MAX_POINTS)
    bad = [float(s) for s, lo, gn, nf in points if nf]
    if len(bad) > MAX_POINTS:
        bad = bad[:: math.ceil(len(bad) / MAX_POINTS)]
    finite = [v for _, v in loss if v is not None]
    log_y = bool(finite) and min(finite) > 0 and max(finite) / min(finite) > 30
    markers, listing = _finding_markers(findings, step_key)
    chart = _line_chart("loss", "loss per step", [("loss", loss, "#1f3b5c")], log_y=log_y, x_label="step",
                        y_label="loss" + (" (log)" if log_y else ""), markers=markers, bad_x=bad)
    parts = [f'<h3>Loss</h3><p class="lede">{_e(origin)}; ▼ marks the step where a finding was first '
             f'seen (hover it), × a step whose loss or gradient was not finite.</p>'
             f'<figure>{chart}</figure>{listing}']
    if any(v is not None for _, v in norms):
        parts.append('<h3>Gradient norm</h3><p class="lede">Global gradient norm per step, log scale.</p>'
                     + "<figure>" + _line_chart("gradnorm", "gradient norm per step",
                                                [("gradient norm", norms, _C["ok"])], log_y=True,
                                                x_label="step", y_label="grad norm", height=200,
                                                markers=markers, bad_x=bad) + "</figure>")
    return "".join(parts)


def _ordered_modules(report_modules: list[dict], stats: list[dict]) -> list[str]:
    order: list[str] = []
    seen = set()
    for m in report_modules:
        name = m.get("module")
        if name is not None and name not in seen:
            seen.add(name)
            order.append(name)
    present = {s.get("module") for s in stats}
    order = [n for n in order if n in present]
    for s in stats:
        name = s.get("module")
        if name is not None and name not in seen:
            seen.add(name)
            order.append(name)
    return order


def _heatmap(modules: list[str], steps: list[int], cells: dict[tuple[str, int], float | None]) -> str:
    logs = [math.log10(v) for v in cells.values() if v is not None and math.isfinite(v) and v > 0]
    label_w, top, row_h = 210, 14, 16
    cell_w = max(3.0, min(60.0, 660 / max(1, len(steps))))
    width = label_w + cell_w * len(steps) + 90
    height = top + row_h * len(modules) + 34
    out = [_svg_open("heatmap", width, height, "gradient norm per layer and step, log colour scale")]
    lo, hi = _decade_range(logs) if logs else (-1, 1)
    per_cell = len(modules) * len(steps) <= HEATMAP_CELL_TITLES   # hover text per cell, or per row
    for r, name in enumerate(modules):
        y = top + r * row_h
        label = _module_label(name)
        out.append('<g class="hrow">' + ("" if per_cell else f"<title>{_e(label)}</title>"))
        out.append(_text(label_w - 6, y + row_h * 0.72, _ellipsize(label, 27), "label", "end"))
        for c, step in enumerate(steps):
            v = cells.get((name, step))
            if v is not None and math.isfinite(v) and v > 0:
                fill = _viridis((math.log10(v) - lo) / (hi - lo))
            else:
                fill = "#e8e8ec"
            tip = f"<title>{_e(label)} · step {step}: {_e(_num(v))}</title>" if per_cell else ""
            out.append(f'<rect x="{_fmt(label_w + c * cell_w)}" y="{y}" width="{_fmt(cell_w + 0.2)}" '
                       f'height="{row_h - 1}" fill="{fill}">{tip}</rect>' if tip else
                       f'<rect x="{_fmt(label_w + c * cell_w)}" y="{y}" width="{_fmt(cell_w + 0.2)}" '
                       f'height="{row_h - 1}" fill="{fill}"/>')
        out.append("</g>")
    stride = max(1, math.ceil(len(steps) / 12))
    for c in range(0, len(steps), stride):
        out.append(_text(label_w + (c + 0.5) * cell_w, height - 18, str(steps[c]), "tick", "middle"))
    out.append(_text(label_w + cell_w * len(steps) / 2, height - 4, "step", "axis-label", "middle"))
    # colour bar
    bx, by, bh = width - 70, top, max(60, row_h * len(modules))
    for i in range(24):
        out.append(f'<rect x="{_fmt(bx)}" y="{_fmt(by + bh - (i + 1) * bh / 24)}" width="12" '
                   f'height="{_fmt(bh / 24 + 0.5)}" fill="{_viridis(i / 23)}"/>')
    cb = _Scale(lo, hi, by + bh, by)
    for k in _decade_ticks(lo, hi, 6):
        out.append(_text(bx + 16, cb(k) + 3, _decade(k), "tick"))
    out.append("</svg>")
    return "".join(out)


def _per_layer_chart(kind: str, label: str, key: str, modules: list[str], steps: list[int],
                     rows: dict[tuple[str, int], dict], *, log_y: bool, y_label: str,
                     y_range: tuple[float, float] | None = None, ref: tuple[float, str] | None = None) -> str:
    series = []
    for name in modules:
        pts = []
        for s in steps:
            row = rows.get((name, s))
            v = _fin(row.get(key)) if row else None
            pts.append((float(s), v))
        if any(v is not None for _, v in pts):
            series.append((_module_label(name), pts, _PALETTE[len(series) % len(_PALETTE)]))
    if not series:
        return ""
    chart = _line_chart(kind, label, series, log_y=log_y, x_label="step", y_label=y_label, y_range=y_range,
                        ref=ref, dots=len(steps) <= 60)
    return f"<figure>{chart}</figure>{_legend([(n, c) for n, _, c in series])}"


def _run_head(info: dict) -> str:
    facts = []
    if info.get("id") is not None:
        facts.append(f"run {_e(info['id'])}")
    if info.get("status"):
        status = "died" if info["status"] == "running" and not info.get("alive", True) else info["status"]
        facts.append(_e(status))
    if info.get("started"):
        try:
            facts.append("started " + _e(datetime.datetime.fromtimestamp(float(info["started"]))
                                         .strftime("%Y-%m-%d %H:%M:%S")))
        except (TypeError, ValueError, OverflowError, OSError):
            pass
    for key, text in (("steps", "steps"), ("device", "device"), ("torch_version", "torch"),
                      ("git_commit", "commit")):
        if info.get(key) not in (None, ""):
            value = str(info[key])[:10] if key == "git_commit" else info[key]
            facts.append(f"{text} {_e(value)}" if key != "steps" else f"{_e(value)} steps")
    error = f'<p class="error-line">error: {_e(info["error"])}</p>' if info.get("error") else ""
    return f'<p class="facts">{" · ".join(facts)}</p>{error}'


def _run_html(report: dict, run: dict | None, findings: list[dict]) -> str:
    parts = []
    if run:
        info = run.get("run") or {}
        steps = run.get("steps") or []
        points = [(int(s["step"]), _fin(s.get("loss")), _fin(s.get("grad_norm")), bool(s.get("nonfinite")))
                  for s in steps if isinstance(s.get("step"), int)]
        parts.append(_run_head(info))
        parts.append(_loss_html(points, run.get("findings") or [], "first_step",
                                "Every step, from the run store"))
        stats = run.get("module_stats") or []
        if stats:
            modules = _ordered_modules(report.get("modules") or [], stats)
            all_steps = sorted({int(s["step"]) for s in stats if isinstance(s.get("step"), int)})
            cols = _pick_columns(all_steps)
            rows = {(s.get("module"), s.get("step")): s for s in stats}
            cells = {(name, step): _fin(rows[(name, step)].get("grad_norm")) if (name, step) in rows else None
                     for name in modules for step in cols}
            note = ""
            if len(cols) < len(all_steps):
                note = f" Showing {len(cols)} of {len(all_steps)} sampled steps."
            parts.append(f'<h3>Gradient norm per layer and step</h3><p class="lede">Each sampled step, the '
                         f'gradient norm arriving at each module (rows from the loss to the input), log colour '
                         f'scale; grey: not measured.{note}</p>'
                         f'<figure class="wide">{_heatmap(modules, cols, cells)}</figure>')
            dead = _per_layer_chart("dead", "dead unit share per layer and step", "dead_share", modules, cols,
                                    rows, log_y=False, y_label="dead share", y_range=(0.0, 1.0))
            if dead:
                parts.append('<h3>Dead units over time</h3><p class="lede">Share of each layer\'s ReLU-family '
                             f'units that are dead, per sampled step.</p>{dead}')
            upd = _per_layer_chart("update", "update ratio per layer and step", "update_ratio", modules, cols,
                                   rows, log_y=True, y_label="‖Δw‖/‖w‖", ref=(1e-3, "~1e-3 typical"))
            if upd:
                parts.append('<h3>Update ratio over time</h3><p class="lede">‖Δw‖/‖w‖ of each layer\'s '
                             f'parameters per sampled step, log scale.</p>{upd}')
        title = "Training run"
    else:
        series = report.get("series") or []
        points = [(int(s["step"]), _fin(s.get("loss")), _fin(s.get("grad_norm")),
                   (_f(s.get("loss")) is not None and not math.isfinite(_f(s.get("loss"))))
                   or (_f(s.get("grad_norm")) is not None and not math.isfinite(_f(s.get("grad_norm")))))
                  for s in series if isinstance(s.get("step"), int)]
        if not points:
            return ""
        parts.append(_loss_html(points, findings, "step", "The observed steps"))
        title = "Observed steps"
    body = "".join(p for p in parts if p)
    return f'<section id="run"><h2>{title}</h2>{body}</section>' if body else ""


# -- tables ---------------------------------------------------------------------------------
def _table(rows: list[dict], columns: list[tuple[str, str, Any]]) -> str:
    head = "".join(f"<th>{_e(title)}</th>" for title, _, _ in columns)
    body = []
    for row in rows:
        cells = []
        for _, key, fmt in columns:
            value = row.get(key)
            cells.append(f"<td>{_e(fmt(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table class="data"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _src(value: Any) -> str:
    short, _ = _source_text(value)
    return short


def _tables_html(report: dict) -> str:
    parts = []
    modules = report.get("modules") or []
    if modules:
        parts.append(f'<details><summary>Modules ({len(modules)})</summary>' + _table(modules, [
            ("module", "module", _module_label), ("type", "type", lambda v: v or ""),
            ("grad norm in", "grad_norm", _num), ("gain", "gain", _num), ("zeroed", "zeroed_share", _pct),
            ("dead", "dead_share", _pct), ("saturated", "saturated_share", _pct),
            ("ops", "ops", _num)]) + "</details>")
    ops = report.get("ops") or []
    if ops:
        parts.append(f'<details><summary>Ops ({len(ops)})</summary>' + _table(ops, [
            ("site", "site", _num), ("op", "op", lambda v: v or ""), ("node", "node", lambda v: v or ""),
            ("module", "module", _module_label), ("source", "source", _src), ("steps", "steps", _num),
            ("per step", "occurrences_per_step", _num), ("grad in", "grad_in", _num),
            ("grad out", "grad_out", _num), ("grad param", "grad_param", _num), ("gain", "gain", _num),
            ("zeroed", "zeroed_share", _pct)]) + "</details>")
    params = report.get("parameters") or []
    if params:
        parts.append(f'<details><summary>Parameters ({len(params)})</summary>' + _table(params, [
            ("name", "name", lambda v: v or ""), ("shape", "shape", lambda v: "×".join(map(str, v or []))),
            ("requires grad", "requires_grad", _num), ("in optimizer", "in_optimizer", _num),
            ("grad steps", "grad_steps", _num), ("grad norm", "grad_norm", _num),
            ("update ratio", "update_ratio", _num), ("max", "update_ratio_max", _num),
            ("zero-update steps", "zero_update_steps", _num)]) + "</details>")
    if not parts:
        return ""
    return (f'<section id="tables"><h2>Tables</h2><p class="lede">The same numbers as the JSON report '
            f'(opened when printing).</p>{"".join(parts)}</section>')


# -- page -----------------------------------------------------------------------------------
_CSS = """
:root{--fg:#1f2328;--muted:#5f6368;--line:#e4e6eb;--bg:#f6f7f9;--card:#fff;
  --err:#c62828;--warn:#b26a00;--info:#1565c0;
  --sans:system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","DejaVu Sans",sans-serif;
  --mono:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.5 var(--sans)}
main{max-width:1080px;margin:0 auto;padding:20px 24px 60px}
header.page{border-bottom:1px solid var(--line);margin-bottom:8px;padding-bottom:8px}
h1{font-size:24px;margin:8px 0 4px}
h2{font-size:19px;margin:30px 0 6px;padding-top:6px;border-top:1px solid var(--line)}
h3{font-size:16px;margin:16px 0 4px}
code{font-family:var(--mono)}
.lede,.facts,.note,.none{color:var(--muted)} .lede{margin:2px 0 10px;font-size:14px}
.facts{font-size:13px;margin:2px 0} .note{font-size:12px} .none{font-style:italic}
nav.toc a{margin-right:14px;color:var(--info);text-decoration:none;font-size:14px}
.badge{display:inline-block;font-size:11px;font-weight:700;letter-spacing:.04em;padding:1px 7px;
  border-radius:10px;color:#fff;vertical-align:2px}
.badge.error{background:var(--err)} .badge.warning{background:var(--warn)} .badge.info{background:var(--info)}
.count{font-size:13px;color:var(--muted);font-weight:400}
.summary .badge{font-size:13px;padding:2px 10px;margin-right:6px}
.finding{background:var(--card);border:1px solid var(--line);border-left:5px solid var(--info);
  border-radius:6px;padding:10px 16px;margin:12px 0;break-inside:avoid}
.finding.sev-error{border-left-color:var(--err)} .finding.sev-warning{border-left-color:var(--warn)}
.finding h3{margin:2px 0} .code{font-family:var(--mono);font-weight:600}
.where{font-size:13px;color:var(--muted);margin:0 0 6px}
.where .mod,.where .op{color:var(--fg);font-family:var(--mono)}
.msg{margin:6px 0;overflow-wrap:anywhere}
.fix{margin:8px 0 4px;background:#eef7ee;border-radius:4px;padding:6px 10px;overflow-wrap:anywhere}
.fix b{color:#2e7d32;margin-right:6px}
.cols{display:grid;grid-template-columns:minmax(0,1.1fr) minmax(0,1fr);gap:14px;align-items:start}
.cols>div:only-child{grid-column:1/-1}
pre.src{display:block;margin:4px 0;background:#f3f4f6;border-radius:4px;padding:6px 0;
  font:12px/1.45 var(--mono);overflow-x:auto;white-space:pre}
pre.src .ln{color:#9aa0a6;padding:0 8px 0 6px;user-select:none}
pre.src .hl{background:#fff3bf;display:inline-block;min-width:100%;box-shadow:inset 3px 0 #e0a800}
table{border-collapse:collapse;font-size:12.5px}
table.evidence{width:100%} table.evidence caption{text-align:left;color:var(--muted);font-size:12px}
table.evidence th{text-align:left;font-weight:500;color:var(--muted);padding:2px 14px 2px 0;
  vertical-align:top;white-space:nowrap;width:1%}
table.evidence td{font-family:var(--mono);padding:2px 0;overflow-wrap:anywhere}
table.evidence td .k{color:var(--muted)}
table.evidence table.sub{width:auto}
table.evidence table.sub th,table.evidence table.sub td{width:auto;padding:0 12px 0 0;font-size:11.5px;
  white-space:nowrap;color:var(--fg)}
table.evidence table.sub th{color:var(--muted);font-weight:500} .more{font-size:11px;color:var(--muted)}
figure{margin:6px 0 12px;background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px;
  break-inside:avoid;overflow-x:auto}
svg.chart{display:block;max-width:100%;height:auto}
svg text{font-family:var(--sans);font-size:11px;fill:#3c4043}
svg text.tick{font-size:10px;fill:#5f6368} svg text.axis-label{font-size:11px;fill:#5f6368}
svg text.label{font-size:11.5px;font-family:var(--mono)} svg tspan.type{fill:#80868b}
svg text.note{font-size:10px;fill:#b71c1c} svg text.missing{font-size:10.5px;fill:#9aa0a6;font-style:italic}
svg text.gain{font-size:11px} svg text.gain.collapse,svg text.gain.explosion{font-weight:700}
.legend{font-size:12.5px;color:var(--muted);margin:4px 0 6px} .legend .li{margin-right:14px;white-space:nowrap}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin:0 5px -1px 8px}
.legend .li .sw{margin-left:0}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px 10px;
  break-inside:avoid;margin-bottom:12px}
.grid .card{margin-bottom:0}
.card-head{font-family:var(--mono);font-size:13px;font-weight:600;overflow-wrap:anywhere}
.card .file{font:12px var(--mono);color:var(--muted);overflow-wrap:anywhere}
ul.timeline{font-size:13px;margin:4px 0 12px;padding-left:18px}
ul.timeline ul{list-style:none;padding-left:8px;margin:0}
.error-line{color:var(--err);font-size:13px;overflow-wrap:anywhere}
details{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:6px 10px;margin:8px 0}
summary{cursor:pointer;font-weight:600}
.scroll{overflow-x:auto} table.data{margin-top:6px}
table.data th{text-align:left;border-bottom:1px solid var(--line);padding:3px 10px 3px 0;white-space:nowrap}
table.data td{padding:2px 10px 2px 0;border-bottom:1px solid #f0f1f3;white-space:nowrap;
  font-variant-numeric:tabular-nums}
footer{margin-top:40px;font-size:12px;color:var(--muted)}
@media (max-width:760px){.cols{grid-template-columns:1fr}}
@media print{
 body{background:#fff;font-size:11pt} main{max-width:none;padding:0}
 nav.toc{display:none} h2,h3{break-after:avoid}
 figure,.card,.finding,svg.chart{break-inside:avoid;page-break-inside:avoid}
 figure{overflow:visible;border:none;padding:0} .scroll{overflow:visible}
 svg.chart{max-width:100%;height:auto} pre.src{white-space:pre-wrap;overflow:visible}
 .finding,.card,details{border-color:#ccc} a{color:inherit;text-decoration:none}
 *{-webkit-print-color-adjust:exact;print-color-adjust:exact}
}
"""

# Open the collapsed tables for printing, close them again after. Logs nothing.
_JS = """
(function(){
  var opened=[];
  window.addEventListener('beforeprint',function(){
    document.querySelectorAll('details:not([open])').forEach(function(d){d.open=true;opened.push(d);});
  });
  window.addEventListener('afterprint',function(){
    opened.forEach(function(d){d.open=false;}); opened=[];
  });
})();
"""


def _script_json(data: Any) -> str:
    """JSON that is safe inside <script>: no '<', '>' or '&' can end the element or open a comment."""
    from leaky.report import _clean

    text = json.dumps(_clean(data), ensure_ascii=False, default=str, allow_nan=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _header(report: dict, run: dict | None, findings: list[dict], title: str) -> str:
    info = report.get("run") or {}
    counts: dict[str, int] = defaultdict(int)
    for f in findings:
        counts[str(f.get("severity") or "info")] += 1
    badges = "".join(f'<span class="badge {s}">{counts[s]} {s}{"s" if counts[s] != 1 else ""}</span>'
                     for s in ("error", "warning", "info") if counts.get(s))
    if not findings:
        badges = '<span class="badge info">no findings</span>'
    lines = []
    script = info.get("script") or ((run or {}).get("run") or {}).get("script")
    argv = info.get("argv") if info.get("script") else ((run or {}).get("run") or {}).get("argv")
    if script:
        cmd = " ".join([str(script)] + [str(a) for a in (argv or [])])
        lines.append(f'<p class="facts">script: <code>{_e(cmd)}</code></p>')
    facts = []
    if info.get("steps") is not None:
        facts.append(f"{_e(info['steps'])} steps observed")
    if info.get("sampled_steps") is not None and info.get("sampled_steps") != info.get("steps"):
        facts.append(f"{_e(info['sampled_steps'])} sampled in detail")
    if info.get("backward_calls") is not None:
        facts.append(f"{_e(info['backward_calls'])} backward calls")
    if info.get("status"):
        facts.append(f"status {_e(info['status'])}")
    versions = " · ".join(f"{name} {_e(report[key])}" for name, key in
                          (("leaky", "leaky_version"), ("torch", "torch_version")) if report.get(key))
    if versions:
        facts.append(versions)
    if facts:
        lines.append(f'<p class="facts">{" · ".join(facts)}</p>')
    for key, what in (("error", "the script failed"), ("internal_error", "leaky's own error")):
        if info.get(key):
            lines.append(f'<p class="error-line">{what}: {_e(info[key])}</p>')
    return (f'<header class="page"><h1>{_e(title)}</h1><div class="summary">{badges}</div>'
            f'{"".join(lines)}</header>')


def _toc(sections: list[tuple[str, str]]) -> str:
    return '<nav class="toc">' + "".join(f'<a href="#{i}">{_e(t)}</a>' for i, t in sections) + "</nav>"


def render_html(report: dict, run: dict | None = None, *, title: str = "leaky report") -> str:
    """The page for one report (`Report.to_dict()`), plus a watched run's stored data if given
    (`run_payload(store, run_id)`). Keys missing from `report` are left out of the page; with no
    `findings` key but a run, the run's stored findings are shown."""
    report = report or {}
    findings = report.get("findings")
    if findings is None:
        findings = (run or {}).get("findings") or []
    findings = list(findings)
    blocks = [
        ("findings", "Findings", _findings_html(findings, run)),
        ("flow", "Gradient flow", _flow_html(list(report.get("modules") or []))),
        ("activations", "Activations", _activations_html(list(report.get("activations") or []))),
        ("recurrences", "Recurrences", _recurrences_html(list(report.get("recurrences") or []))),
        ("run", "Training run" if run else "Observed steps", _run_html(report, run, findings)),
        ("tables", "Tables", _tables_html(report)),
    ]
    present = [(i, t) for i, t, body in blocks if body]
    data = _script_json(report)
    return "".join([
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="leaky">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>",
        _header(report, run, findings, title),
        _toc(present),
        "".join(body for _, _, body in blocks),
        f'<footer>Made by leaky from the <code>{_e(report.get("schema") or "leaky/report-v1")}</code> '
        f'report, which this page carries as JSON (script#leaky-data).</footer>',
        f'</main><script type="application/json" id="leaky-data">{data}</script>',
        f"<script>{_JS}</script></body></html>\n",
    ])


def run_payload(store, run_id: int) -> dict:
    """A stored run's data for `render_html(..., run=...)`."""
    return {"run": store.run(run_id), "steps": store.steps(run_id),
            "module_stats": store.module_stats(run_id), "findings": store.findings(run_id)}


def write_html(path: str | os.PathLike, html: str) -> None:
    """Write the page as UTF-8; an OSError is the caller's to report."""
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(html)

