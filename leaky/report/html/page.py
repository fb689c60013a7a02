"""The page: the document that holds the sections, in order, with its head, table of
contents, CSS (`page.css`, package data), the report as JSON and a few lines of script.

    render_html(report)                 # Report.to_dict()
    render_html(report, run)            # with run_payload(store, run_id) of a watched run

Each section is rendered by its own module and is left out of the page (and of the table
of contents) when the report has nothing for it.
"""
from __future__ import annotations

import functools
import json
import os
import sqlite3
from collections import defaultdict
from importlib import resources
from typing import Any

from leaky.report import _clean
from leaky.report.html.activations import activations_html
from leaky.report.html.findings import SEVERITIES, findings_html
from leaky.report.html.flow import flow_html
from leaky.report.html.recurrences import recurrences_html
from leaky.report.html.run import run_html
from leaky.report.html.tables import tables_html
from leaky.report.html.values import esc
from leaky.report.overhead import overhead_line

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

_FAILURES = (("error", "the script failed"), ("internal_error", "leaky's own error"))


@functools.cache
def css() -> str:
    """The page's style sheet (leaky/report/html/page.css)."""
    return resources.files(__package__).joinpath("page.css").read_text(encoding="utf-8")


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
        ("findings", "Findings", findings_html(findings, run)),
        ("flow", "Gradient flow", flow_html(list(report.get("modules") or []), findings)),
        ("activations", "Activations", activations_html(list(report.get("activations") or []))),
        ("recurrences", "Recurrences", recurrences_html(list(report.get("recurrences") or []))),
        ("run", "Training run" if run else "Observed steps", run_html(report, run, findings)),
        ("tables", "Tables", tables_html(report)),
    ]
    present = [(i, t) for i, t, body in blocks if body]
    data = script_json(report)
    return "".join([
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="leaky">',
        f"<title>{esc(title)}</title><style>\n{css()}</style></head><body><main>",
        header(report, run, findings, title),
        toc(present),
        "".join(body for _, _, body in blocks),
        f'<footer>Made by leaky from the <code>{esc(report.get("schema") or "leaky/report-v1")}</code> '
        f'report, which this page carries as JSON (script#leaky-data).</footer>',
        f'</main><script type="application/json" id="leaky-data">{data}</script>',
        f"<script>{_JS}</script></body></html>\n",
    ])


def header(report: dict, run: dict | None, findings: list[dict], title: str) -> str:
    """The title, a badge per severity, the script's command line and the run's facts."""
    lines = []
    command = _command(report.get("run") or {}, (run or {}).get("run") or {})
    if command:
        lines.append(f'<p class="facts">script: <code>{esc(command)}</code></p>')
    facts = _facts(report)
    if facts:
        lines.append(f'<p class="facts">{" · ".join(facts)}</p>')
    info = report.get("run") or {}
    cost = overhead_line(info.get("overhead"))   # a watch's: the words its last line and `leaky show` print
    if cost:
        lines.append(f'<p class="facts overhead">{esc(cost)}</p>')
    for key, what in _FAILURES:
        if info.get(key):
            lines.append(f'<p class="error-line">{what}: {esc(info[key])}</p>')
    return (f'<header class="page"><h1>{esc(title)}</h1><div class="summary">{_badges(findings)}</div>'
            f'{"".join(lines)}</header>')


def _badges(findings: list[dict]) -> str:
    if not findings:
        return '<span class="badge info">no findings</span>'
    counts: dict[str, int] = defaultdict(int)
    for f in findings:
        counts[str(f.get("severity") or "info")] += 1
    return "".join(f'<span class="badge {s}">{counts[s]} {s}{"s" if counts[s] != 1 else ""}</span>'
                   for s in SEVERITIES if counts.get(s))


def _command(info: dict, stored: dict) -> str:
    """The script and its arguments: the report's, else the stored run's."""
    script = info.get("script") or stored.get("script")
    argv = info.get("argv") if info.get("script") else stored.get("argv")
    if not script:
        return ""
    return " ".join([str(script)] + [str(a) for a in (argv or [])])


def _facts(report: dict) -> list[str]:
    info = report.get("run") or {}
    facts = []
    if info.get("steps") is not None:
        facts.append(f"{esc(info['steps'])} steps observed")
    if info.get("sampled_steps") is not None and info.get("sampled_steps") != info.get("steps"):
        facts.append(f"{esc(info['sampled_steps'])} sampled in detail")
    if info.get("backward_calls") is not None:
        facts.append(f"{esc(info['backward_calls'])} backward calls")
    if info.get("status"):
        facts.append(f"status {esc(info['status'])}")
    versions = " · ".join(f"{name} {esc(report[key])}" for name, key in
                          (("leaky", "leaky_version"), ("torch", "torch_version")) if report.get(key))
    if versions:
        facts.append(versions)
    return facts


def toc(sections: list[tuple[str, str]]) -> str:
    return '<nav class="toc">' + "".join(f'<a href="#{i}">{esc(t)}</a>' for i, t in sections) + "</nav>"


def script_json(data: Any) -> str:
    """JSON that is safe inside <script>: no '<', '>' or '&' can end the element or open a comment."""
    text = json.dumps(_clean(data), ensure_ascii=False, default=str, allow_nan=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def run_payload(store, run_id: int) -> dict:
    """A stored run's data for `render_html(..., run=...)`; `module_order`: the modules in model
    order (see `recorded_order`), so that `leaky report RUN` draws its rows as the model runs."""
    return {"run": store.run(run_id), "steps": store.steps(run_id),
            "module_stats": store.module_stats(run_id), "findings": store.findings(run_id),
            "module_order": recorded_order(store, run_id)}


def recorded_order(store, run_id: int) -> list[str]:
    """The run's modules in the order it recorded them: a watch writes each checked step's
    module table (loss to input) in one batch, so within the first step a module was seen in,
    the order of insertion is model order (Store.module_stats reads them back by name).
    [] when the store cannot say."""
    try:
        rows = store.conn.execute("SELECT module FROM module_stats WHERE run_id = ? GROUP BY module"
                                  " ORDER BY min(step), min(rowid)", (run_id,)).fetchall()
    except sqlite3.Error:
        return []
    return [row[0] for row in rows]


def write_html(path: str | os.PathLike, html: str) -> None:
    """Write the page as UTF-8; an OSError is the caller's to report."""
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(html)
