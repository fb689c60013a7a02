"""The Findings section: one card per finding, most severe first, each root cause right
before the findings it explains (order.py: the order, and the words that say it).

A card shows the severity, code and name; where (module · op · file:line · step, and for a
watched run the first and last step the finding was seen); the message; the lines of
source around it; the evidence as a table; the fix.
"""
from __future__ import annotations

import json
from typing import Any

from leaky.report.format import module_label
from leaky.report.html.order import Arranged, arrange, lede
from leaky.report.html.snippets import Sources
from leaky.report.html.values import esc, source_text, value_text

SEVERITIES = ("error", "warning", "info")
EVIDENCE_ROWS = 12          # rows of a list of records shown in the evidence table
SHORT_LIST = 8              # a longer list of values is cut to its first few, with a count


def findings_html(findings: list[dict], run: dict | None) -> str:
    """The section; with a run, each finding is matched to the run's stored one (first/last step)."""
    seen = {}
    if run:
        for stored in run.get("findings") or []:
            seen.setdefault(finding_key(stored), stored)
    sources = Sources()
    if not findings:
        return ('<section id="findings"><h2>Findings</h2>'
                '<p class="none">No findings: no leaks found.</p></section>')
    arranged = arrange(findings)
    parts = [finding_section(i + 1, f, sources, seen.get(finding_key(f)) if run else None, _links(arranged, i),
                             arranged.explained_by.get(i))
             for i, f in enumerate(arranged.findings)]
    return (f'<section id="findings"><h2>Findings <span class="count">{len(findings)}</span></h2>'
            f'<p class="lede">{esc(lede(arranged))} Each names the module, the op and the line of your code, '
            f'with the numbers behind it and what to change.</p>{"".join(parts)}</section>')


def _links(arranged: Arranged, i: int) -> str:
    """The links between a cause and what it explains: "Explained by #k" on a finding placed
    under its cause, "Root cause of #a, #b" on the cause."""
    out = ""
    if i in arranged.explained_by:
        k = arranged.explained_by[i]
        cause = arranged.findings[k]
        out += (f'<p class="explained">Explained by <a href="#finding-{k + 1}">'
                f'#{k + 1}</a> {esc(cause.get("code") or "")} {esc(cause.get("name") or "")}, above.</p>')
    if arranged.explains.get(i):
        refs = ", ".join(f'<a href="#finding-{j + 1}">#{j + 1}</a>' for j in arranged.explains[i])
        out += f'<p class="explains">Root cause of {refs}, below.</p>'
    return out


def finding_key(f: dict) -> tuple:
    """What a report finding and a stored one have in common: code, module, op and line."""
    src = f.get("source") or {}
    return (f.get("code"), f.get("module"), f.get("op") or None, src.get("file") or None, src.get("line"))


def finding_section(i: int, f: dict, sources: Sources, seen: dict | None, links: str = "",
                    under: int | None = None) -> str:
    """The card of finding number i; `under`: the 0-based page position of the cause it is placed under."""
    severity = str(f.get("severity") or "info")
    sev_cls = severity if severity in SEVERITIES else "info"
    snippet = sources.snippet(f.get("source"))
    evidence = evidence_table(f.get("evidence"))
    body = ""
    if snippet or evidence:
        body = f'<div class="cols">{f"<div>{snippet}</div>" if snippet else ""}' \
               f'{f"<div>{evidence}</div>" if evidence else ""}</div>'
    name = f.get("name") or ""
    code = f.get("code") or ""
    placed = "" if under is None else f' data-explained-by="{under + 1}"'
    return (f'<section class="finding sev-{sev_cls}" id="finding-{i}" data-code="{esc(code)}" '
            f'data-severity="{esc(severity)}"{placed}>'
            f'<h3><span class="badge {sev_cls}">{esc(severity.upper())}</span> '
            f'<span class="code">{esc(code)}</span> {esc(name)}</h3>'
            f'<p class="where">{" · ".join(_where(f, seen)) or "&lt;model&gt;"}</p>'
            f'{links}<p class="msg">{esc(f.get("message") or "")}</p>{change_line(f.get("cause"))}{body}'
            f'<p class="fix"><b>Fix</b> {esc(f.get("fix") or "")}</p></section>')


def change_line(cause: Any) -> str:
    """The line to change, where a finding (report-v1's optional `cause`) or a diff's parted
    site (diff-v1's `change`) names one: {"file", "line", "what"}."""
    if not isinstance(cause, dict) or not cause.get("file"):
        return ""
    short, full = source_text(cause)
    return (f'<p class="cause"><b>Change</b> <span class="file" title="{esc(full)}">{esc(short)}</span>, '
            f'{esc(cause.get("what") or "")}</p>')


def _where(f: dict, seen: dict | None) -> list[str]:
    """module · op · file:line · step, and the steps a watched run saw it first and last."""
    where = []
    if "module" in f and f.get("module") is not None:
        where.append(f'<span class="mod">{esc(module_label(f.get("module")))}</span>')
    if f.get("op"):
        where.append(f'<span class="op">{esc(f["op"])}</span>')
    short, full = source_text(f.get("source"))
    if short:
        where.append(f'<span class="file" title="{esc(full)}">{esc(short)}</span>')
    if f.get("step") is not None:
        where.append(f"step {esc(f['step'])}")
    if seen is not None:
        first, last = seen.get("first_step"), seen.get("last_step")
        if first is not None:
            span = f"first seen at step {first}"
            if last not in (None, first):
                span += f", last at step {last}"
            where.append(esc(span))
    return where


def evidence_table(evidence: Any) -> str:
    if not isinstance(evidence, dict) or not evidence:
        return ""
    rows = "".join(f'<tr><th scope="row">{esc(k)}</th><td>{evidence_value(v)}</td></tr>'
                   for k, v in evidence.items())
    return f'<table class="evidence"><caption>evidence</caption>{rows}</table>'


def evidence_value(value: Any, depth: int = 0) -> str:
    """One evidence value: a dict as key/value lines, a list of records (at the top) as a
    table, a long list cut to its first values (all of them in the hover text)."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "<br>".join(f'<span class="k">{esc(k)}</span> {evidence_value(v, depth + 1)}'
                           for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return _evidence_list(list(value), depth)
    return esc(value_text(value))


def _evidence_list(items: list, depth: int) -> str:
    if items and all(isinstance(v, dict) for v in items) and depth == 0:
        return _records_table(items, depth)
    if len(items) <= SHORT_LIST:
        return "[" + ", ".join(evidence_value(v, depth + 1) for v in items) + "]"
    full = ", ".join(value_text(v) if not isinstance(v, (dict, list)) else json.dumps(v, default=str)
                     for v in items)
    return (f'<span title="{esc(full)}">[' + ", ".join(evidence_value(v, depth + 1) for v in items[:6])
            + f', … {len(items)} values]</span>')


def _records_table(items: list[dict], depth: int) -> str:
    keys: list[str] = []
    for item in items:
        keys.extend(k for k in item if k not in keys)
    shown = items[:EVIDENCE_ROWS]
    head = "".join(f"<th>{esc(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{evidence_value(item.get(k), depth + 1)}</td>" for k in keys)
                   + "</tr>" for item in shown)
    more = (f'<div class="more">… {len(items) - len(shown)} more</div>'
            if len(items) > len(shown) else "")
    return f'<table class="sub"><tr>{head}</tr>{body}</table>{more}'
