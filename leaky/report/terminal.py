"""Terminal view: the findings as stories (leaky/story.py), then the gradient-flow table.

Built from rich renderables so tests can render at a fixed width. User-provided text
(module names, file paths, messages) is wrapped in `Text`, never parsed as markup.

On a terminal the view is wrapped at its width: a finding's lines after its heading, and
every line that wraps, stay indented under it (`Hanging`), and a table whose words do not
fit is laid out one row per block rather than cut inside a word (`WholeWords`). Into a
pipe or a file (a CI log) nothing is wrapped (`people_console`), so a command printed to be
copied stays on one line.
"""
from __future__ import annotations

import copy
import dataclasses
import io

from rich.console import Console, ConsoleOptions, Group
from rich.measure import Measurement
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from leaky.finding import Finding, Severity
from leaky.report.format import (SEVERITY_STYLE, distinct_width, module_label, num, pct, short_path,
                                 shorten_middle)
from leaky.story import stories


INDENT = len("WARNING ")     # where a finding's text starts, under its code


def people_console(stderr: bool = False, file=None) -> Console:
    """The console the commands print to: wrapped at the terminal's width on a terminal;
    never wrapped into a pipe or a file (tables still fit its width, COLUMNS or 80)."""
    console = Console(stderr=stderr, file=file, highlight=False)
    console.soft_wrap = not console.is_terminal
    return console


class Hanging:
    """Text whose lines after the first, and every line it wraps into, start `indent` columns
    in. Where the console does not wrap (soft wrap: a pipe), it prints as the Text: its own
    lines keep the indent they were written with, and none is cut. `str()` is its plain text."""

    def __init__(self, text: Text, indent: int = INDENT) -> None:
        self.text, self.indent = text, indent

    def __str__(self) -> str:
        return self.text.plain

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.text)

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        if options.no_wrap or options.max_width <= 2 * self.indent:
            yield self.text
            return
        pad, lines = Text(" " * self.indent), []
        for number, line in enumerate(self.text.split("\n", allow_blank=True)):
            if number == 0:          # the heading: its first line takes the whole width
                first = line.wrap(console, options.max_width)[0]
                lines.append(first)
                line = line[len(first.plain):]
            line = line[len(line.plain) - len(line.plain.lstrip(" ")):]
            if line.plain or number > 0:
                lines.extend(pad + piece for piece in line.wrap(console, options.max_width - self.indent))
        yield from Text("\n").join(lines).render(console, end=self.text.end)


def finding_renderable(finding: Finding, lead: Text | None = None) -> Hanging:
    """A finding: its severity, code and place on one line, then its message, the line to
    change and the fix, indented under it. `lead` goes before the severity (watch's step)."""
    text = Text()
    if lead is not None:
        text.append_text(lead)
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
    below = "\n" + " " * INDENT
    text.append(below + finding.message.replace("\n", below))
    if finding.cause is not None:
        text.append(below + "change: ", style="yellow")
        text.append(f"{short_path(finding.cause.file)}:{finding.cause.line}, {finding.cause.what}".replace("\n", below))
    text.append(below + "fix: ", style="green")
    text.append(finding.fix.replace("\n", below))
    return Hanging(text)


class WholeWords:
    """A table that never cuts a word in two. rich narrows the widest columns first, below
    their longest word if need be (`update/weigh⏎t`); here each column is given its width:
    its widest line while the table fits, then the widest narrowed, none below its longest
    word. When even that does not fit, the table is one block per row, each column's header
    beside its cell."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table)

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        widths = self.widths(console, options)
        if widths is None:
            yield from self.blocks(console, options)
            return
        yield self.fitted(widths)

    def fitted(self, widths: list[int]) -> Table:
        table = copy.copy(self.table)
        table.columns = [dataclasses.replace(column, width=width) for column, width in zip(table.columns, widths)]
        return table

    def widths(self, console: Console, options: ConsoleOptions) -> list[int] | None:
        wide = options.update_width(10_000)
        ranges = [_column_range(console, wide, column) for column in self.table.columns]
        widths = [high for _, high in ranges]
        room = options.max_width - (Measurement.get(console, wide, self.table).maximum - sum(widths))
        if sum(low for low, _ in ranges) > room:
            return None
        for _ in range(sum(widths) - room):
            narrower = max((i for i, (low, _) in enumerate(ranges) if widths[i] > low), key=lambda i: widths[i])
            widths[narrower] -= 1
        return widths

    def blocks(self, console: Console, options: ConsoleOptions):
        table = self.table
        if table.title:
            yield Text(table.title, style="italic") if isinstance(table.title, str) else table.title
        columns = [(column.header, list(column.cells)) for column in table.columns]
        for row in range(table.row_count):
            block = Table.grid(padding=(0, 2))
            block.add_column(style="bold")
            block.add_column(overflow="fold")     # NOTE: cuts a word only if it alone is wider than the console
            for header, cells in columns:
                block.add_row(header, cells[row])
            widths = WholeWords(block).widths(console, options)
            yield Rule(style="dim") if row else Text("")
            yield block if widths is None else WholeWords(block).fitted(widths)
        if table.caption:
            yield Text(table.caption, style="dim") if isinstance(table.caption, str) else table.caption


def _column_range(console: Console, options: ConsoleOptions, column) -> tuple[int, int]:
    """A column's (longest word, widest line), padding aside; its width when it has one."""
    if column.width is not None:
        return column.width, column.width
    measured = [Measurement.get(console, options, cell) for cell in (column.header, *column.cells)]
    return max(m.minimum for m in measured), max(m.maximum for m in measured)


def flow_table(report, limit: int = 40) -> "FlowTable":
    return FlowTable(report, limit)


class FlowTable:
    """The gradient-flow table, laid out for the width it is rendered at: when the full
    module names do not fit, they are shortened from the middle (`t…h.3.mlp.c_fc`), never
    below the width that still tells every row apart; then long module types are cut with
    `…` (`CausalSelfAtte…`); a table that still cannot fit whole words is one block per row."""

    _COLUMNS = (("module", "left"), ("type", "left"), ("grad norm in", "right"), ("gain", "right"),
                ("zeroed", "right"), ("dead", "right"), ("saturated", "right"))
    _TYPE_FLOOR = 9     # the narrowest the type column is cut to ("LayerNorm" whole)

    def __init__(self, report, limit: int = 40) -> None:
        self.rows = report.modules[:limit]
        self.more = len(report.modules) - len(self.rows)

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        names = [row["module"] for row in self.rows]
        full = self.table(names)
        wide = options.update_width(10_000)
        excess = Measurement.get(console, wide, full).maximum - options.max_width
        if excess <= 0 or not names:
            yield full
            return
        longest = max(len(n) for n in names)
        width = min(longest, max(longest - excess, min(distinct_width(names), options.max_width // 2)))
        names = [shorten_middle(n, width) for n in names]
        table = self.table(names, module_width=width)
        excess = Measurement.get(console, wide, table).minimum - options.max_width
        longest_type = max(len(row["type"]) for row in self.rows)
        if excess > 0 and longest_type > self._TYPE_FLOOR:
            table = self.table(names, module_width=width, type_width=max(longest_type - excess, self._TYPE_FLOOR))
        yield WholeWords(table)

    def table(self, names: list[str], module_width: int | None = None, type_width: int | None = None) -> Table:
        table = Table(title="gradient flow, loss → input", title_justify="left", show_edge=False)
        widths = {"module": module_width, "type": type_width}
        for column, justify in self._COLUMNS:
            table.add_column(column, justify=justify, width=widths.get(column))
        for name, row in zip(names, self.rows):
            table.add_row(Text(name), Text(row["type"], no_wrap=True, overflow="ellipsis"), num(row["grad_norm"]),
                          num(row["gain"]), pct(row["zeroed_share"]), pct(row["dead_share"]),
                          pct(row["saturated_share"]))
        if self.more > 0:
            table.caption = f"{self.more} more modules in the JSON report (--json PATH) and the HTML one (--html PATH)"
        return table


def summary_line(report) -> Text:
    """What was observed, and the findings told as stories (leaky/story.py): the root causes by
    severity and how many findings they explain ("1 root cause (error) explaining 7 more");
    with nothing explained, the counts per severity ("2 errors  1 warning")."""
    run = report.run
    text = Text(f"leaky: {run.get('steps', 0)} steps observed, {run.get('backward_calls', 0)} backward calls. ")
    if not report.findings:
        return text.append("No leaks found.", style="green")
    told = stories(list(report.findings))
    explained = sum(len(rest) for _, rest in told)
    if not explained:
        return _append(text, _tally(list(report.findings)), "  ")
    causes = [root for root, rest in told if rest or root.severity is not Severity.INFO]
    text.append(f"{len(causes)} root cause{'s' if len(causes) != 1 else ''} (")
    _append(text, _tally(causes, numbered=len(causes) != 1), ", ")
    text.append(f") explaining {explained} more")
    alone = [root for root, rest in told if not rest and root.severity is Severity.INFO]
    return _append(text.append("  "), _tally(alone), "  ") if alone else text


def _tally(findings: list[Finding], numbered: bool = True) -> list[tuple[str, str]]:
    """("2 errors", style), ("1 warning", style)...; one finding's severity alone ("error")
    when not `numbered`."""
    parts = []
    for severity in Severity:
        n = sum(1 for f in findings if f.severity is severity)
        if n:
            word = f"{severity.value}{'s' if n != 1 else ''}"
            parts.append((f"{n} {word}" if numbered else word, SEVERITY_STYLE[severity.value]))
    return parts


def _append(text: Text, parts: list[tuple[str, str]], between: str) -> Text:
    for i, (part, style) in enumerate(parts):
        text.append(between if i else "").append(part, style=style)
    return text


def explained_renderable(explained: list[Finding]) -> Group:
    """What a root cause explains, under it: one line each, the finding's heading, cut at the
    width (its full text, whose advice is the root's, is in the JSON report)."""
    more = f"{len(explained)} more finding{'s' if len(explained) != 1 else ''}"
    lines = [Text(" " * INDENT + f"explains {more}, told under it:", style="dim")]
    for finding in explained:
        lead = " " * INDENT + "↳ "
        heading = Text(lead + str(finding_renderable(finding)).split("\n")[0], no_wrap=True, overflow="ellipsis")
        heading.stylize(SEVERITY_STYLE[finding.severity.value], len(lead), len(lead) + len("WARNING"))
        lines.append(heading)
    return Group(*lines)


def report_renderable(report, table: bool = True) -> Group:
    """The summary, then one story per root cause (leaky/story.py): the root in full, what it
    explains one line each under it; then the gradient-flow table."""
    parts = [summary_line(report)]
    for root, explained in stories(list(report.findings)):
        parts.append(finding_renderable(root))
        if explained:
            parts.append(explained_renderable(explained))
    if table and report.modules:
        parts.append(flow_table(report))
    return Group(*parts)


def render_text(report, width: int = 100, table: bool = True) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False).print(report_renderable(report, table))
    return buffer.getvalue()


def print_report(report, console: Console | None = None, table: bool = True) -> None:
    (console or people_console()).print(report_renderable(report, table))
