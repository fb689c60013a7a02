"""Tables, as aligned text or Markdown, and the lines around them: what every benchmark prints.

    print_table(("model", "plain ms/step"), [("mlp", "12.3")], markdown=False)
"""
from __future__ import annotations


def print_table(header, body, markdown: bool) -> None:
    """A table as markdown or aligned text; the first column (two when the second is
    "mode") left-aligned, the rest right-aligned."""
    left = 2 if header[1] == "mode" else 1
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join(["---"] * left + ["---:"] * (len(header) - left)) + "|")
        for row in body:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) if i < left else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in body:
        print(line(row))


def print_notes(notes: list[str]) -> None:
    if notes:
        print("\nnotes:")
        for note in notes:
            print(f"  - {note}")


def print_verdicts(results: list[Result], targets: dict[str, float], label=lambda mode: mode) -> None:
    """One line per target: the models whose ratio is above it, or "within target on all"."""
    for mode, target in targets.items():
        measured = [r for r in results if mode in r.modes]
        if not measured:
            continue
        over = [f"{r.model} ({r.modes[mode].ratio:.3f}x)" for r in measured if r.modes[mode].ratio > target]
        verdict = f"ABOVE target on {', '.join(over)}" if over else "within target on all"
        print(f"{label(mode)}: target <= {target:g}x: {verdict} ({len(measured)} model(s))")
