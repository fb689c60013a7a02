"""Terminal view: findings (most severe first), then the gradient-flow table.

Built from rich renderables so tests can render at a fixed width. User-provided text
(module names, file paths, messages) is wrapped in `Text`, never parsed as markup.
"""
from __future__ import annotations

import io

from rich.console import Console, ConsoleOptions, Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from leaky.finding import Finding, Severity
from leaky.report.format import (SEVERITY_STYLE, distinct_width, module_label, num, pct, short_path,
                                 shorten_middle)


def finding_renderable(finding: Finding) -> Text:
    text = Text()
    text.append(f"{finding.severity.value.upper():7} ", style=SEVERITY_STYLE[finding.severity.value])
    text.append(f"{finding.code} {finding.name}", style="bold")
    where = []
    if finding.module is not None:
        where.append(module_label(finding.module))
    if finding.op:
        where.append(finding.op)
    if finding.source is not None:
        where.append(f"{short_path(finding.source.file)}:{finding.source.line}")
    if finding.step is not None:
        where.append(f"step {finding.step}")
    if where:
        text.append("  " + " · ".join(where), style="dim")
    text.append("\n        " + finding.message)
    if finding.cause is not None:
        text.append("\n        change: ", style="yellow")
        text.append(f"{short_path(finding.cause.file)}:{finding.cause.line}, {finding.cause.what}")
    text.append("\n        fix: ", style="green")
    text.append(finding.fix)
    return text


def flow_table(report, limit: int = 40) -> "FlowTable":
    return FlowTable(report, limit)


class FlowTable:
    """The gradient-flow table, laid out for the width it is rendered at: when the full
    module names do not fit, they are shortened from the middle (`t…h.3.mlp.c_fc`), never
    below the width that still tells every row apart."""

    _COLUMNS = (("module", "left"), ("type", "left"), ("grad norm in", "right"), ("gain", "right"),
                ("zeroed", "right"), ("dead", "right"), ("saturated", "right"))

    def __init__(self, report, limit: int = 40) -> None:
        self.rows = report.modules[:limit]
        self.more = len(report.modules) - len(self.rows)

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        names = [row["module"] for row in self.rows]
        full = self.table(names)
        excess = Measurement.get(console, options.update_width(10_000), full).maximum - options.max_width
        if excess <= 0 or not names:
            yield full
            return
        longest = max(len(n) for n in names)
        width = min(longest, max(longest - excess, min(distinct_width(names), options.max_width // 2)))
        yield self.table([shorten_middle(n, width) for n in names], module_width=width)

    def table(self, names: list[str], module_width: int | None = None) -> Table:
        table = Table(title="gradient flow, loss → input", title_justify="left", show_edge=False)
        for column, justify in self._COLUMNS:
            table.add_column(column, justify=justify, width=module_width if column == "module" else None)
        for name, row in zip(names, self.rows):
            table.add_row(Text(name), Text(row["type"]), num(row["grad_norm"]), num(row["gain"]),
                          pct(row["zeroed_share"]), pct(row["dead_share"]), pct(row["saturated_share"]))
        if self.more > 0:
            table.caption = f"{self.more} more modules in the JSON report"
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
                        style=SEVERITY_STYLE[severity.value])
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
