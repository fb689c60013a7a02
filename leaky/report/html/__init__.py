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

One file per part, composed the way rich composes renderables:

    page.py          the document: head, table of contents, sections in order, footer, data
    page.css         its style sheet (package data, inlined into the page)
    findings.py      Findings: one card per finding, with its evidence   (snippets.py: source lines)
                     (order.py: root causes with what they explain, most severe first)
    flow.py          Gradient flow: norm arriving per module and the gain through it
    activations.py   Activations: a histogram per site, one class per histogram kind
    recurrences.py   Recurrences: the gradient norm per time step
    run.py           the run: head line, per-layer charts   (timeline.py: loss and grad norm per
                     step with the findings marked; heatmap.py: layer × step)
    tables.py        Tables: modules, ops, parameters
    svg.py           the chart kit: colours, scales, ticks, text   (linechart.py: line charts)
    diff.py          the page of `leaky diff A B` (diff.css; overlay.py: A and B drawn overlaid)
    values.py        report values read, written for a person, escaped

Charts are inline SVG written here; CSS and the few lines of JavaScript (open the
collapsed tables when printing) are inline too: no network, no fonts, no CDN. Every
string that comes from the user's program goes through `html.escape`; the embedded JSON
copy of the data escapes `<`, `>` and `&`. See docs/html-report.md.
"""
from __future__ import annotations

from leaky.report.html.diff import render_diff_html
from leaky.report.html.page import render_html, run_payload, write_html

__all__ = ["render_diff_html", "render_html", "run_payload", "write_html"]
