"""Loss and gradient norm per step, with a ▼ at each step where a finding was first seen
and a × at each step whose loss or gradient was not finite; the findings listed by step.

A point is (step, loss, grad_norm, nonfinite). A long run is thinned for drawing only, to
about MAX_POINTS points per curve (`spread`: each bucket's lowest and highest value).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from leaky.report.format import module_label
from leaky.report.html.linechart import line_chart, spread
from leaky.report.html.svg import COLOR
from leaky.report.html.values import esc

MAX_POINTS = 2000           # loss and gradient-norm curves: at most this many points (min/max kept)
FOLD_AFTER = 8              # a listing of more steps than this is collapsed
RANK = {"error": 2, "warning": 1, "info": 0}

Point = tuple[int, float | None, float | None, bool]    # step, loss, grad norm, not finite


def loss_html(points: list[Point], findings: list[dict], step_key: str, origin: str) -> str:
    """points: (step, loss, grad_norm, nonfinite); `step_key`: the findings' step field."""
    if not points:
        return ""
    loss = spread([(float(s), lo if lo is not None and math.isfinite(lo) else None) for s, lo, _, _ in points],
                  MAX_POINTS)
    # NOTE: a step without a norm (a watch takes it on a schedule) is left out, so the line
    # joins the steps that have one; a non-finite step stays a gap (and its ×)
    measured = [(float(s), gn if gn is not None and math.isfinite(gn) and not nf else None)
                for s, _, gn, nf in points if nf or gn is not None]
    norms = spread(measured, MAX_POINTS)
    taken = sum(1 for _, _, gn, nf in points if gn is not None and not nf)
    bad = [float(s) for s, lo, gn, nf in points if nf]
    finite_steps = len(points) - len(bad)
    if len(bad) > MAX_POINTS:
        bad = bad[:: math.ceil(len(bad) / MAX_POINTS)]
    finite = [v for _, v in loss if v is not None]
    log_y = bool(finite) and min(finite) > 0 and max(finite) / min(finite) > 30
    markers, listing = finding_markers(findings, step_key)
    chart = line_chart("loss", "loss per step", [("loss", loss, "#1f3b5c")], log_y=log_y, x_label="step",
                       y_label="loss" + (" (log)" if log_y else ""), markers=markers, bad_x=bad)
    parts = [f'<h3>Loss</h3><p class="lede">{esc(origin)}; ▼ marks the step where a finding was first '
             f'seen (hover it), × a step whose loss or gradient was not finite.</p>'
             f'<figure>{chart}</figure>{listing}']
    if any(v is not None for _, v in norms):
        some = "" if taken >= finite_steps else \
            f" Taken on {taken} of {len(points)} steps (a watch takes it on a schedule), joined by lines."
        parts.append(f'<h3>Gradient norm</h3><p class="lede">Global gradient norm per step, log scale.{esc(some)}</p>'
                     + "<figure>" + line_chart("gradnorm", "gradient norm per step",
                                               [("gradient norm", norms, COLOR["ok"])], log_y=True,
                                               x_label="step", y_label="grad norm", height=200,
                                               markers=markers, bad_x=bad) + "</figure>")
    return "".join(parts)


def finding_markers(findings: list[dict], step_key: str) -> tuple[list[tuple[float, str, str]], str]:
    """Vertical markers (one per step, coloured by the worst finding there) and a list under the chart."""
    by_step: dict[int, list[dict]] = OrderedDict()
    for f in findings:
        s = f.get(step_key)
        if isinstance(s, (int, float)) and not isinstance(s, bool):
            by_step.setdefault(int(s), []).append(f)
    markers, items = [], []
    for step in sorted(by_step):
        group = by_step[step]
        worst = max(group, key=lambda f: RANK.get(str(f.get("severity")), 0))
        names = [f"{f.get('code')} {f.get('name')} · {module_label(f.get('module'))}" for f in group]
        tip = f"step {step}: " + "; ".join(names)
        markers.append((float(step), severity_color(worst.get("severity")), tip))
        listed = "".join(_run_finding_item(f) for f in group)
        items.append(f'<li><b>step {step}</b><ul>{listed}</ul></li>')
    text = f'<ul class="timeline">{"".join(items)}</ul>' if items else ""
    if len(items) > FOLD_AFTER:
        text = (f'<details><summary>Findings by the step they were first seen ({len(items)} steps)</summary>'
                f'{text}</details>')
    return markers, text


def severity_color(sev: Any) -> str:
    return COLOR.get(str(sev), COLOR["info"])


def _run_finding_item(f: dict) -> str:
    severity = str(f.get("severity") or "")
    op = f" · {esc(f['op'])}" if f.get("op") else ""
    return (f'<li class="run-finding"><span class="badge {esc(severity)}">{esc(severity.upper())}</span> '
            f'<span class="code">{esc(f.get("code") or "")}</span> {esc(f.get("name") or "")} · '
            f'{esc(module_label(f.get("module")))}{op}</li>')
