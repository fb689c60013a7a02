"""Terminal view of a `leaky probe` result: one row per probe, with what it measured and its
verdict, then each failing probe's finding.

Rendered from `ProbeResult.to_dict()` (the `leaky/probe-v1` JSON), so the terminal and the
JSON never disagree.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from leaky.report.format import num, pct

_VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "could not run": "yellow"}


def _num(value) -> str:
    """A number of the JSON: non-finite ones are written as strings ("inf"), float() reads them back."""
    return num(float(value))


def _overfit_cells(m: dict) -> str:
    if m.get("remaining") is None:
        return f"{len(m.get('losses') or [])} steps on the first batch"
    text = (f"loss {_num(m['first_loss'])} → {_num(m['last_loss'])} on the first batch, {len(m['losses'])} steps; "
            f"floor {_num(m['loss_floor'])}\n{pct(float(m['remaining']))} of it left (passes at ≤ "
            f"{pct(m['max_remaining'])})")
    return text


def _input_cells(m: dict) -> str:
    if m.get("zeroed_loss") is None or m.get("real_loss") is None:
        return ""
    scored = "held-out" if m["held_out"] else "last training"
    text = (f"{scored} loss: real {_num(m['real_loss'])}, zeroed {_num(m['zeroed_loss'])}\n"
            f"passes at real < zeroed − {_num(m['margin'])} (noise)")
    beaten = float(m["real_loss"]) < float(m["zeroed_loss"]) - float(m["margin"])   # then a lost input tells nothing
    if m.get("lost_at") and m["lost_at"].get("line") and not beaten:
        lost = m["lost_at"]
        text += f"\ninput made constant by {lost['op']} at line {lost['line']}"
    elif m.get("mispaired") and m["mispaired"].get("line") and not beaten:
        text += f"\ninputs and targets are not the same samples (line {m['mispaired']['line']})"
    return text


_CELLS = {"LK308": _overfit_cells, "LK309": _input_cells}


def probe_table(data: dict) -> Table:
    table = Table(title=f"probes: {data['config']['steps']} steps each, from the same start", title_justify="left",
                  show_lines=True)
    table.add_column("probe", overflow="fold", ratio=1)
    table.add_column("measured", overflow="fold", ratio=3)
    table.add_column("verdict", overflow="fold", ratio=2)
    for probe in data["probes"]:
        verdict = Text(probe["verdict"], style=_VERDICT_STYLE.get(probe["verdict"], ""))
        verdict.append(f"\n{probe['reason']}", style="dim")
        table.add_row(f"{probe['code']} {probe['name']}\n{probe['seconds']:.1f} s",
                      _CELLS[probe["code"]](probe["measured"]), verdict)
    return table


def audit_lines(data: dict, most: int = 3) -> list[str]:
    """What the audit found on the program as it is (the real-input run), one line per check:
    its places, at most `most` of them. Info findings are counted, not listed."""
    notes = data.get("audit") or []
    serious = [a for a in notes if a["severity"] != "info"]
    by_code: dict[str, list[dict]] = {}
    for note in serious:
        by_code.setdefault(note["code"], []).append(note)
    lines = []
    for code, found in by_code.items():
        places = "; ".join(a["where"] for a in found[:most])
        more = f" and {len(found) - most} more" if len(found) > most else ""
        lines.append(f"  {found[0]['severity']} {code} {found[0]['name']}: {places}{more}")
    info = len(notes) - len(serious)
    if info:
        lines.append(f"  {'and ' if lines else ''}{info} info finding{'s' if info > 1 else ''}")
    return lines


def render_probe(console: Console, data: dict) -> None:
    console.print(probe_table(data))
    lines = audit_lines(data)
    if lines:
        steps = min(data["config"]["audit_steps"], data["config"]["steps"])
        console.print(Text(f"The audit of the program as it is (its first {steps} steps, as `leaky audit`; the "
                           "probe runs' own audits are not findings):", style="bold"), soft_wrap=True)
        for line in lines:
            console.print(Text(line), soft_wrap=True)
    for finding in data["findings"]:
        where = finding["module"]
        source = finding["source"]
        place = " · ".join(p for p in ((f"module {where or '<root>'}" if where is not None else None),
                                       (f"{source['file']}:{source['line']}" if source else None)) if p)
        console.print(Text(f"✗ {finding['code']} {finding['name']}" + (f" at {place}" if place else ""),
                           style="bold red"), soft_wrap=True)
        console.print(Text(finding["message"]), soft_wrap=True)
        console.print(Text(f"fix: {finding['fix']}", style="dim"), soft_wrap=True)
        console.print(Text(f"see `leaky explain {finding['code']}`", style="dim"))
    noise = data["noise"]
    if noise is not None:
        scores = ", ".join(num(s) for s in noise["scores"])
        console.print(Text(f"Noise: real-input scores {scores} (the user's seeds, then shifted by +1, +2, ...); the "
                           f"real inputs must beat the zeroed ones by {num(noise['margin'])}.", style="dim"))
    counts = {v: sum(p["verdict"] == v for p in data["probes"]) for v in ("pass", "fail", "could not run")}
    console.print(Text(f"{len(data['probes'])} probes in {data['seconds']:.1f} s: " +
                       ", ".join(f"{n} {v}" for v, n in counts.items() if n), style="bold"))
