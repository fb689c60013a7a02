"""The Tables section: the JSON report's module, op and parameter rows, each table collapsed
in a `<details>` (the page's script opens them for printing).

Each table is a list of columns (title, the row's key, how to write its value).
"""
from __future__ import annotations

from typing import Any, Callable

from leaky.report.format import module_label
from leaky.report.html.values import esc, share_text, source_text, value_text

Column = tuple[str, str, Callable[[Any], str]]


def _text(value: Any) -> str:
    return value or ""


def _shape(value: Any) -> str:
    return "×".join(map(str, value or []))


def _source(value: Any) -> str:
    short, _ = source_text(value)
    return short


MODULE_COLUMNS: list[Column] = [
    ("module", "module", module_label), ("type", "type", _text),
    ("grad norm in", "grad_norm", value_text), ("gain", "gain", value_text), ("zeroed", "zeroed_share", share_text),
    ("dead", "dead_share", share_text), ("saturated", "saturated_share", share_text),
    ("ops", "ops", value_text)]
OP_COLUMNS: list[Column] = [
    ("site", "site", value_text), ("op", "op", _text), ("node", "node", _text),
    ("module", "module", module_label), ("source", "source", _source), ("steps", "steps", value_text),
    ("per step", "occurrences_per_step", value_text), ("grad in", "grad_in", value_text),
    ("grad out", "grad_out", value_text), ("grad param", "grad_param", value_text), ("gain", "gain", value_text),
    ("zeroed", "zeroed_share", share_text)]
PARAMETER_COLUMNS: list[Column] = [
    ("name", "name", _text), ("shape", "shape", _shape),
    ("requires grad", "requires_grad", value_text), ("in optimizer", "in_optimizer", value_text),
    ("grad steps", "grad_steps", value_text), ("grad norm", "grad_norm", value_text),
    ("update ratio", "update_ratio", value_text), ("max", "update_ratio_max", value_text),
    ("zero-update steps", "zero_update_steps", value_text)]

# (the report's key, the table's summary, its columns), in page order
TABLES = (("modules", "Modules", MODULE_COLUMNS), ("ops", "Ops", OP_COLUMNS),
          ("parameters", "Parameters", PARAMETER_COLUMNS))


def tables_html(report: dict) -> str:
    parts = []
    for key, summary, columns in TABLES:
        rows = report.get(key) or []
        if rows:
            parts.append(f'<details><summary>{summary} ({len(rows)})</summary>' + table(rows, columns) + "</details>")
    if not parts:
        return ""
    return (f'<section id="tables"><h2>Tables</h2><p class="lede">The same numbers as the JSON report '
            f'(opened when printing).</p>{"".join(parts)}</section>')


def table(rows: list[dict], columns: list[Column]) -> str:
    head = "".join(f"<th>{esc(title)}</th>" for title, _, _ in columns)
    body = []
    for row in rows:
        cells = [f"<td>{esc(write(row.get(key)))}</td>" for _, key, write in columns]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table class="data"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')
