"""Terminal views of stored runs: `leaky runs` and `leaky show RUN`."""
from __future__ import annotations

import math
import os

from rich.console import Console, ConsoleOptions, Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from leaky.report.format import SEVERITY_STYLE, num, run_status, when
from leaky.report.overhead import overhead_line
from leaky.report.terminal import Hanging

_BARS = " ▁▂▃▄▅▆▇█"


def runs_table(runs: list[dict], path: str) -> "RunsTable":
    return RunsTable(runs, path)


class RunsTable:
    """`leaky runs`: one line per run at any width. The script and its arguments take the
    width left and are cut with `…`; when that leaves them little, the table tightens (the
    start time without year and seconds, one space less between columns)."""

    _COLUMNS = ("id", "started", "status", "steps", "findings", "errors", "last loss", "script")
    # (time format, table options), widest first
    _LAYOUTS = (("%Y-%m-%d %H:%M:%S", {}), ("%m-%d %H:%M", {"collapse_padding": True, "pad_edge": False}))
    _COMMAND_ROOM = 32   # what the script column should get before the table tightens

    def __init__(self, runs: list[dict], path: str) -> None:
        self.runs, self.path = runs, path
        self.commands = [os.path.basename(run["script"] or "") + " " + " ".join(run["argv"] or []) for run in runs]

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        want = min(self._COMMAND_ROOM, max((len(c) for c in self.commands), default=0))
        for layout in self._LAYOUTS:
            bare = self.table(layout, ["" for _ in self.commands])
            room = options.max_width - Measurement.get(console, options.update_width(10_000), bare).maximum
            if room + len("script") >= want:
                break
        yield self.table(layout, self.commands)

    def table(self, layout: tuple[str, dict], commands: list[str]) -> Table:
        form, style = layout
        table = Table(title=f"runs in {self.path}", title_justify="left", show_edge=False, **style)
        for column in self._COLUMNS:
            table.add_column(column, justify="right" if column in ("id", "steps", "findings", "errors") else "left",
                             no_wrap=column != "script")
        for run, command in zip(self.runs, commands):
            table.add_row(str(run["id"]), when(run["started"], form), run_status(run), str(run["steps"]),
                          str(run["findings"]), str(run["errors"]), num(run.get("last_loss")),
                          Text(command, no_wrap=True, overflow="ellipsis"))
        if not self.runs:
            table.caption = "no runs yet: `leaky watch train.py` records one"
        return table


def sparkline(values: list[float | None], width: int = 60) -> str:
    """A one-line picture of a series (log-free, min to max): '×' where a value was not
    finite, nothing for a step without a value (a watch takes the gradient norm on a
    schedule: the picture is of the steps that have one, in order), and a level line where
    the values all print alike (a clipped norm of 0.99999 and 1: no swing the numbers beside
    it do not show)."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    stride = max(1, math.ceil(len(known) / width))
    buckets = [known[i:i + stride] for i in range(0, len(known), stride)]
    finite = [v for v in known if math.isfinite(v)]
    if not finite:
        return "×" * len(buckets)
    low, high = min(finite), max(finite)
    level = num(low) == num(high)
    span = high - low

    def bar(bucket: list[float]) -> str:
        if not all(math.isfinite(v) for v in bucket):
            return "×"
        if level:
            return _BARS[len(_BARS) // 2]
        return _BARS[1 + int((bucket[0] - low) / span * (len(_BARS) - 2))]

    return "".join(bar(bucket) for bucket in buckets)


def _measured(values: list[float | None]) -> str:
    """' (taken on K of N steps)' where some steps have no value."""
    known = sum(v is not None for v in values)
    return "" if known == len(values) else f"  (taken on {known} of {len(values)} steps)"


def show_run(store, run_id: int) -> Group:
    run = store.run(run_id)
    steps = store.steps(run_id)
    findings = store.findings(run_id)
    head = Text(f"run {run_id}: {run['script']} {' '.join(run['argv'] or [])}\n", style="bold")
    head.append(f"{run_status(run)} · started {when(run['started'])} · {run['steps']} steps · torch "
                f"{run['torch_version']} · leaky {run['leaky_version']} · {run['device']}"
                + (f" · commit {run['git_commit'][:10]}" if run.get("git_commit") else ""), style="dim")
    if run.get("error"):
        head.append(f"\nerror: {run['error']}", style="red")
    report = store.report(run_id) or {}
    overhead = (report.get("run") or {}).get("overhead") or {}
    cost = overhead_line(overhead)
    if cost:
        head.append(f"\n{cost}", style="dim")
    nan = float("nan")
    losses = [nan if s["nonfinite"] else s["loss"] for s in steps]
    norms = [nan if s["nonfinite"] else s["grad_norm"] for s in steps]
    timeline = Text()
    if steps:
        timeline.append(f"loss      {sparkline(losses)}  {num(_first(losses))} → {num(_last(losses))}"
                        f"{_measured(losses)}\n")
        clipped = overhead.get("norms_from_clip")
        if any(v is not None for v in norms):
            timeline.append(f"grad norm {sparkline(norms)}  {num(_first(norms))} → {num(_last(norms))}"
                            f"{_measured(norms)}" + ("  (after the script's clip_grad_norm_)" if clipped else ""))
        else:
            timeline.append("grad norm not measured (no optimizer step: the parameters were updated by hand)"
                            if overhead.get("optimizer_steps") == 0
                            else "grad norm not measured")
    listing = [Text(f"\nfindings, in the order they appeared ({len(findings)}):" if findings
                    else "\nno findings.\n", style="bold")]
    steps_of = _steps_in_report(report)
    for f in findings:
        where = " · ".join(x for x in (f.get("module"), f.get("op")) if x)
        if f.get("source"):
            where += f" ({os.path.basename(f['source']['file'])}:{f['source']['line']})"
        text = Text()
        # NOTE: the step the finding names (a unit's first death, as the run's last line and
        # its report say it), then the steps the watch's check passes found it at
        own = steps_of.get(_where_key(f))
        found = [f"found at step {f['first_step']}"] if own is not None and own != f["first_step"] else []
        if f["last_step"] != f["first_step"]:
            found.append(f"last seen {f['last_step']}")
        text.append(f"step {f['first_step'] if own is None else own}", style="bold")
        text.append(f" ({', '.join(found)}) " if found else " ", style="dim")
        text.append(f"{f['severity'].upper()} ", style=SEVERITY_STYLE.get(f["severity"], ""))
        text.append(f"{f['code']} {f['name']}  ", style="bold")
        text.append(where, style="dim")
        text.append(f"\n    {f['message']}")
        cause = f.get("cause")
        if cause:
            text.append(f"\n    change: {os.path.basename(cause['file'])}:{cause['line']}, {cause['what']}")
        text.append(f"\n    fix: {f['fix']}")
        listing.append(Hanging(text, indent=4))     # wrapped lines stay under the heading
    return Group(head, timeline, *listing)


def _where_key(finding: dict) -> tuple:
    source = finding.get("source") or {}
    return finding.get("code"), finding.get("module"), finding.get("op"), source.get("file"), source.get("line")


def _steps_in_report(report: dict) -> dict[tuple, int]:
    """The step each finding of the run's stored report names, by its place."""
    return {_where_key(f): f["step"] for f in report.get("findings") or []
            if isinstance(f, dict) and isinstance(f.get("step"), int)}


def _first(values):
    return next((v for v in values if v is not None and math.isfinite(v)), None)


def _last(values):
    return next((v for v in reversed(values) if v is not None and math.isfinite(v)), None)
