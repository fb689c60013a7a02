"""The run section. For a watched run (from the store): its head line, loss and gradient
norm over every step, and per sampled step the layer × step heatmap, dead units and update
ratios per layer. For an audit: the loss and gradient norm of the observed steps (`series`).

Long runs are thinned for drawing only: at most MAX_COLUMNS sampled steps (evenly spaced,
first and last kept) in the heatmap and the per-layer charts.
"""
from __future__ import annotations

import math
import re

from leaky.report.format import module_label, run_status, when
from leaky.report.html.heatmap import heatmap
from leaky.report.html.linechart import legend, line_chart
from leaky.report.html.svg import PALETTE
from leaky.report.html.timeline import Point, loss_html
from leaky.report.html.values import as_float, esc, finite

MAX_COLUMNS = 200           # heatmap / per-layer series: at most this many sampled steps
DOTS_UP_TO = 60             # per-layer series of at most this many steps are drawn with dots
HEAD_FACTS = (("steps", "steps"), ("device", "device"), ("torch_version", "torch"), ("git_commit", "commit"))


def run_html(report: dict, run: dict | None, findings: list[dict]) -> str:
    """The section: a watched run's history when `run` is given, else the audit's steps."""
    if run:
        parts, title = _watched(report, run), "Training run"
    else:
        points = _series_points(report.get("series") or [])
        if not points:
            return ""
        parts, title = [loss_html(points, findings, "step", "The observed steps")], "Observed steps"
    body = "".join(p for p in parts if p)
    return f'<section id="run"><h2>{title}</h2>{body}</section>' if body else ""


def _series_points(series: list[dict]) -> list[Point]:
    return [(int(s["step"]), finite(s.get("loss")), finite(s.get("grad_norm")),
             _not_finite(s.get("loss")) or _not_finite(s.get("grad_norm")))
            for s in series if isinstance(s.get("step"), int)]


def _not_finite(value) -> bool:
    x = as_float(value)
    return x is not None and not math.isfinite(x)


def _watched(report: dict, run: dict) -> list[str]:
    steps = run.get("steps") or []
    points = [(int(s["step"]), finite(s.get("loss")), finite(s.get("grad_norm")), bool(s.get("nonfinite")))
              for s in steps if isinstance(s.get("step"), int)]
    parts = [run_head(run.get("run") or {}),
             loss_html(points, run.get("findings") or [], "first_step", "Every step, from the run store")]
    stats = run.get("module_stats") or []
    if stats:
        parts.extend(_per_layer(report, run, stats))
    return parts


def _per_layer(report: dict, run: dict, stats: list[dict]) -> list[str]:
    """The heatmap, dead units and update ratios of the sampled steps."""
    modules, known = ordered_modules(report.get("modules") or [], stats, run.get("module_order"))
    all_steps = sorted({int(s["step"]) for s in stats if isinstance(s.get("step"), int)})
    cols = pick_columns(all_steps)
    rows = {(s.get("module"), s.get("step")): s for s in stats}
    cells = {(name, step): finite(rows[(name, step)].get("grad_norm")) if (name, step) in rows else None
             for name in modules for step in cols}
    note = ""
    if len(cols) < len(all_steps):
        note = f" Showing {len(cols)} of {len(all_steps)} sampled steps."
    rows_are = "rows from the loss to the input"
    if known < len(modules):
        rows_are = "rows by module name" if not known else f"{rows_are}, then the others by name"
    parts = [f'<h3>Gradient norm per layer and step</h3><p class="lede">Each sampled step, the '
             f'gradient norm arriving at each module ({rows_are}), log colour '
             f'scale; grey: not measured.{note}</p>'
             f'<figure class="wide">{heatmap(modules, cols, cells)}</figure>']
    dead = per_layer_chart("dead", "dead unit share per layer and step", "dead_share", modules, cols,
                           rows, log_y=False, y_label="dead share", y_range=(0.0, 1.0))
    if dead:
        parts.append('<h3>Dead units over time</h3><p class="lede">Share of each layer\'s ReLU-family '
                     f'units that are dead, per sampled step.</p>{dead}')
    upd = per_layer_chart("update", "update ratio per layer and step", "update_ratio", modules, cols,
                          rows, log_y=True, y_label="‖Δw‖/‖w‖", ref=(1e-3, "~1e-3 typical"))
    if upd:
        parts.append('<h3>Update ratio over time</h3><p class="lede">‖Δw‖/‖w‖ of each layer\'s '
                     f'parameters per sampled step, log scale.</p>{upd}')
    return parts


def pick_columns(steps: list[int], most: int = MAX_COLUMNS) -> list[int]:
    if len(steps) <= most:
        return steps
    last = len(steps) - 1
    return [steps[round(i * last / (most - 1))] for i in range(most)]   # first and last kept


def ordered_modules(report_modules: list[dict], stats: list[dict],
                    recorded: list[str] | None = None) -> tuple[list[str], int]:
    """The modules with stored statistics in model order, and how many lead whose order is known.

    Model order is the report's module table (loss to input), then the order the run
    recorded them in (`recorded`: each checked step's module table, as the store received
    it), for modules the report lacks. Modules neither names go last, by name with the
    numbers in a name compared as numbers (layers.2 before layers.10) only as this fallback."""
    present = {s.get("module") for s in stats if isinstance(s.get("module"), str)}
    order = list(dict.fromkeys(n for n in [m.get("module") for m in report_modules] + list(recorded or [])
                               if n in present))
    rest = sorted(present - set(order), key=natural_key)
    return order + rest, len(order)


def natural_key(name: str) -> tuple:
    """A module path's sort key with its numbers as numbers: "layers.10" after "layers.2"."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name))


def per_layer_chart(kind: str, label: str, key: str, modules: list[str], steps: list[int],
                    rows: dict[tuple[str, int], dict], *, log_y: bool, y_label: str,
                    y_range: tuple[float, float] | None = None, ref: tuple[float, str] | None = None) -> str:
    """One line per module of `key` over the sampled steps, and its legend; "" when none has it."""
    series = []
    for name in modules:
        pts = []
        for s in steps:
            row = rows.get((name, s))
            v = finite(row.get(key)) if row else None
            pts.append((float(s), v))
        if any(v is not None for _, v in pts):
            series.append((module_label(name), pts, PALETTE[len(series) % len(PALETTE)]))
    if not series:
        return ""
    chart = line_chart(kind, label, series, log_y=log_y, x_label="step", y_label=y_label, y_range=y_range,
                       ref=ref, dots=len(steps) <= DOTS_UP_TO)
    return f"<figure>{chart}</figure>{legend([(n, c) for n, _, c in series])}"


def run_head(info: dict) -> str:
    """run N · status · started … · steps, device, torch, commit; and the run's error."""
    facts = []
    if info.get("id") is not None:
        facts.append(f"run {esc(info['id'])}")
    if info.get("status"):
        facts.append(esc(run_status(info)))
    if info.get("started"):
        try:
            facts.append("started " + esc(when(float(info["started"]))))
        except (TypeError, ValueError, OverflowError, OSError):
            pass
    for key, text in HEAD_FACTS:
        if info.get(key) not in (None, ""):
            value = str(info[key])[:10] if key == "git_commit" else info[key]
            facts.append(f"{text} {esc(value)}" if key != "steps" else f"{esc(value)} steps")
    error = f'<p class="error-line">error: {esc(info["error"])}</p>' if info.get("error") else ""
    return f'<p class="facts">{" · ".join(facts)}</p>{error}'
