"""Terminal view of a `leaky diff` result (`leaky/diff-v1`, docs/diff.md): the verdict, the
first parted site on top with its numbers side by side and the line to look at, then the
loss curves, the set-up differences, and every site that parted.

Rendered from the JSON dict, so the terminal and the JSON never disagree.
"""
from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table
from rich.text import Text

from leaky.report.format import num
from leaky.report.terminal import WholeWords

_STATUS = {"parted": ("parted", "bold red"), "changed_op": ("op changed", "bold red"),
           "only_a": ("only in A", "yellow"), "only_b": ("only in B", "yellow"), "same": ("same", "dim")}
_SHARES = ("zeroed_share", "dead_share", "flat_share")
SHOWN = 12   # parted sites listed in the table; the JSON has them all


def _where(source: dict | None) -> str:
    return "—" if not source else f"{os.path.basename(source['file'])}:{source['line']}"


def _side(side: dict | None) -> str:
    if side is None:
        return "—"
    return f"{side.get('module') or '<script>'} · {side['op']}\n{_where(side.get('source'))}"


def _value(stat: str, value) -> str:
    if value is None:
        return "—"
    if stat in _SHARES:
        return f"{100 * value:.0f}%"
    return num(value)


def _noise(difference: dict) -> str:
    bound = difference["noise"]
    if difference.get("log10"):
        return f"×{10 ** bound:.2g}"
    return f"{100 * bound:.0f} pts" if difference["stat"] in _SHARES else num(bound)


def site_table(data: dict) -> Table:
    """The parted sites from the loss toward the inputs, the first on top."""
    parted = [entry for entry in data["sites"] if entry["parted"]]
    table = Table(title=f"sites that parted, from the loss toward the inputs ({len(parted)} of "
                        f"{len(data['sites'])})", title_justify="left", show_lines=True)
    for column in ("", "in A", "in B", "statistic: A → B (noise)"):
        table.add_column(column, overflow="fold")
    for entry in parted[:SHOWN]:
        label, style = _STATUS[entry["status"]]
        numbers = "\n".join(f"{d['stat']}: {_value(d['stat'], d['a'])} → {_value(d['stat'], d['b'])} "
                            f"(±{_noise(d)})" for d in entry["differences"]) or entry["meaning"]
        table.add_row(Text(label, style=style), _side(entry["a"]), _side(entry["b"]), numbers)
    return table


def render_diff(console: Console, data: dict) -> None:
    a, b = data.get("a") or {}, data.get("b") or {}
    if data["verdict"] == "unusable":
        console.print(Text(f"leaky diff: the comparison could not be made: {data['reason']}", style="bold red"))
        return
    console.print(Text(f"leaky diff: A = {a.get('label')} ({a.get('steps')} steps), "
                       f"B = {b.get('label')} ({b.get('steps')} steps)", style="bold"))
    first = data["first_parted"]
    if first is not None:
        console.print(Text("First parted site: ", style="bold red") + Text(first["meaning"]), soft_wrap=False)
        change = first.get("change")
        if change:
            console.print(Text(f"  look at: {_where(change)}: {change.get('what', '')}", style="bold"))
        for finding in first["explained_by"][:4]:
            console.print(Text(f"  {finding['run']}: {finding['code']} {finding['name']} ({finding['severity']}) "
                               f"at {_where(finding.get('source'))}", style="dim"))
        console.print(WholeWords(site_table(data)))
    one_side = [sum(entry["status"] == status for entry in data["sites"]) for status in ("only_a", "only_b")]
    if any(one_side):
        console.print(Text(f"Sites on one side only: {one_side[0]} in A's backward pass only, {one_side[1]} in B's "
                           "(all of them in the JSON and the HTML page).", style="dim"))
    for row in data["loss"]:
        if row.get("meaning"):
            console.print(Text(f"Loss (optimizer {row['optimizer']}): {row['meaning']}.", style="yellow"))
    if data["config"]:
        config = Table(title="set-up differences leaky saw", title_justify="left")
        for column in ("what", "A", "B", "line in B"):
            config.add_column(column, overflow="fold")
        for row in data["config"]:
            config.add_row(row["what"], str(row["a"]), str(row["b"]), _where(row["source_b"]))
        console.print(WholeWords(config))
    only_b = data["findings"]["only_b"]
    if only_b:
        console.print(Text("Findings in B only: " + ", ".join(f"{f['code']} {f['name']} ({f['severity']})"
                                                             for f in only_b), style="yellow"))
    console.print(Text(f"Noise: {data['noise']['detail']}.", style="dim"))
    if data["verdict"] == "same":
        console.print(Text("No difference beyond the noise: the gradient flows through B as through A.",
                           style="bold green"))
