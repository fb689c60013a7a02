"""Terminal view: findings (most severe first), then the gradient-flow table.

Built from rich renderables so tests can render at a fixed width. User-provided text
(module names, file paths, messages) is wrapped in `Text`, never parsed as markup.
"""
from __future__ import annotations

import io
import os

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from leaky.checks._util import num, pct
from leaky.finding import Finding, Severity

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def finding_renderable(finding: Finding) -> Text:
    text = Text()
    text.append(f"{finding.severity.value.upper():7} ", style=_STYLE[finding.severity])
    text.append(f"{finding.code} {finding.name}", style="bold")
    where = []
    if finding.module is not None:
        where.append(finding.module or "<root>")
    if finding.op:
        where.append(finding.op)
    if finding.source is not None:
        where.append(f"{_short(finding.source.file)}:{finding.source.line}")
    if finding.step is not None:
        where.append(f"step {finding.step}")
    if where:
        text.append("  " + " · ".join(where), style="dim")
    text.append("\n        " + finding.message)
    text.append("\n        fix: ", style="green")
    text.append(finding.fix)
    return text


def flow_table(report, limit: int = 40) -> Table:
    table = Table(title="gradient flow, loss → input", title_justify="left", show_edge=False)
    for column, justify in (("module", "left"), ("type", "left"), ("grad norm in", "right"),
                            ("gain", "right"), ("zeroed", "right"), ("dead", "right"), ("saturated", "right")):
        table.add_column(column, justify=justify)
    for row in report.modules[:limit]:
        table.add_row(Text(row["module"]), Text(row["type"]), num(row["grad_norm"]), num(row["gain"]),
                      pct(row["zeroed_share"]), pct(row["dead_share"]), pct(row["saturated_share"]))
    if len(report.modules) > limit:
        table.caption = f"{len(report.modules) - limit} more modules in the JSON report"
    return table


def summary_line(report) -> Text:
    run = report.run
    counts = {s: sum(1 for f in report.findings if f.severity is s) for s in Severity}
    text = Text(f"leaky: {run.get('steps', 0)} steps observed, {run.get('backward_calls', 0)} backward calls. ")
    if not report.findings:
        text.append("No leaks found.", style="green")
    for severity in Severity:
        if counts[severity]:
            text.append(f"{counts[severity]} {severity.value}{'s' if counts[severity] != 1 else ''}  ",
                        style=_STYLE[severity])
    return text


def report_renderable(report, table: bool = True) -> Group:
    parts = [summary_line(report)]
    parts.extend(finding_renderable(f) for f in report.findings)
    if table and report.modules:
        parts.append(flow_table(report))
    return Group(*parts)


def render_text(report, width: int = 100, table: bool = True) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False).print(report_renderable(report, table))
    return buffer.getvalue()


def print_report(report, console: Console | None = None, table: bool = True) -> None:
    (console or Console(stderr=False, highlight=False)).print(report_renderable(report, table))
