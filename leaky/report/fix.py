"""Terminal view of a `leaky fix` result: one row per fix tried, then the changes that help.

Rendered from `FixResult.to_dict()` (the `leaky/fix-v1` JSON), so the terminal and the
JSON never disagree.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from leaky.report.format import num
from leaky.report.terminal import WholeWords

_VERDICT_STYLE = {"helps": "bold green", "no effect": "yellow", "hurts": "bold red", "not judged": "dim"}


def fix_table(data: dict) -> Table:
    base = data["baseline"]
    measure = data.get("measure") or {"label": "loss", "own_loss": True}
    scored = (f"loss: the mean over the {data['config']['holdout']} batches after the last step, model frozen "
              "(held out)" if data["held_out"] else "loss: the mean of the last training losses (nothing held out)")
    if not measure["own_loss"]:
        scored = f"{measure['label']}: {measure['how']}"
    table = Table(title=f"fixes tried: {base['steps']} steps each, from the same start", title_justify="left",
                  caption=scored, caption_justify="left", show_lines=True)
    for column, justify in (("finding", "left"), ("fix tried", "left"), ("leak before → after", "left"),
                            (f"{measure['label']} unfixed → fixed", "right"), ("cost", "right"),
                            ("verdict", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    for fix in data["fixes"]:
        finding = "\n".join(f"{f['code']} {f['name']}" for f in _unique(fix["findings"]))
        leak = "\n".join(f"{m['finding']} {m['measure']}: {m['before']} → {m['after']}" for m in fix["metrics"])
        loss = f"{num(fix['loss_unfixed'])} → {num(fix['loss_fixed'])}"
        if fix["changes_loss"]:
            loss += f"\n(both scored the fixed way; margin {num(fix['margin'])})"
        if fix["run"]["error"]:
            loss += f"\n(the fixed run failed: {fix['run']['error']})"
        table.add_row(finding, fix["fix"], leak, loss,
                      f"{fix['seconds']:.1f} s", Text(fix["verdict"], style=_VERDICT_STYLE.get(fix["verdict"], "")))
    return table


def _unique(findings: list[dict]) -> list[dict]:
    seen, kept = set(), []
    for f in findings:
        if (f["code"], f["name"]) not in seen:
            seen.add((f["code"], f["name"]))
            kept.append(f)
    return kept


def notes(data: dict) -> list[Text]:
    lines = []
    base = data["baseline"]
    if base["steps"] and not data["held_out"]:
        lines.append(Text(f"The program ended after {base['steps']} steps, before any held-out batch: runs are "
                          "scored on their last training losses, which the model has trained on. Pass a larger "
                          "step budget to the script, or a smaller --steps.", style="yellow"))
    if data["reproducible"] is False:
        lines.append(Text("The program cannot be re-run from the same state: two runs with the same seeds "
                          f"differed ({data['difference']}). It may read live data, the clock or an unseeded "
                          "source. No fix is judged; the rows show what each run measured.", style="bold yellow"))
    noise = data["noise"]
    if noise is not None:
        scores = ", ".join(num(s) for s in noise["scores"])
        lines.append(Text(f"Noise: unfixed scores {scores} (the user's seeds, then shifted by +1, +2, ...); a fix "
                          f"must beat the unfixed score by {num(noise['margin'])} to count.", style="dim"))
    for fix in data["fixes"]:
        if fix["note"]:
            lines.append(Text(f"{fix['fix']}: {fix['note']}.", style="dim"))
    for item in data["without_fix"]:
        why = f" ({item['why']})" if item.get("why") else ""
        lines.append(Text(f"{item['code']} {item['name']} at {item['where']}: no mechanical fix to try{why}; see "
                          f"`leaky explain {item['code']}`.", style="dim"))
    return lines


_LINE_STYLE = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def _change_text(change: dict) -> Text:
    """A diff with its lines coloured, or a snippet; never re-wrapped (it is meant to be copied)."""
    text = Text()
    for line in change["text"].splitlines():
        style = "" if change["kind"] != "diff" else next((s for p, s in _LINE_STYLE if line.startswith(p)), "")
        text.append(line + "\n", style=style)
    return text


def render_fix(console: Console, data: dict) -> None:
    if not data["baseline"]["steps"]:
        console.print(Text("leaky fix: no optimizer step was observed, so there is nothing to compare.", style="red"))
        return
    serious = [f for f in data["findings"] if f["severity"] != "info"]
    if not serious:
        console.print(Text("leaky fix: the audit found no warning or error, so no fix is proposed.", style="green"))
        return
    if not data["fixes"]:
        console.print(Text(f"leaky fix: {len(serious)} finding(s), none with a mechanical fix to try.",
                           style="yellow"))
    else:
        console.print(WholeWords(fix_table(data)))   # at 80 columns its words do not all fit
    for fix in data["fixes"]:
        change = fix["change"]
        if fix["verdict"] != "helps" or change is None:
            continue
        console.print(Text(f"✓ {fix['fix']}", style="bold green"))
        console.print(_change_text(change), soft_wrap=True)
    for line in notes(data):
        console.print(line)
    console.print(Text(f"{len(data['fixes'])} fix(es) tried in {data['seconds']:.1f} s; "
                       f"{sum(f['verdict'] == 'helps' for f in data['fixes'])} help.", style="bold"))
