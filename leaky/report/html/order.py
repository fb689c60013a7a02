"""The order of the Findings section, and the words that say it.

A root cause and the findings it explains form a group: the cause first, then what it
explains (most severe first). A finding that explains nothing and is explained by nothing
is a group of one. Groups go most severe first (a group ranks by its most severe finding:
a warning that explains an error ranks with the errors), and keep the report's order
where they rank alike. So the page reads errors, then warnings, then info, except that a
root cause stands right before the findings it explains; `lede` says exactly that.

Who explains whom is read from the findings' own evidence, as `sort_findings` reads it:
a cause's code in the symptom's `explained_by`, or the symptom's code and module in the
cause's `explains`. A symptom with more than one cause is placed under the first of them
in the report's order (one that would lead back to itself is skipped).
"""
from __future__ import annotations

from dataclasses import dataclass

from leaky.story import ancestors

RANK = {"error": 2, "warning": 1, "info": 0}


def rank(f: dict) -> int:
    return RANK.get(str(f.get("severity")), 0)


def explains(cause: dict, symptom: dict) -> bool:
    """Whether `cause` names itself as a cause of `symptom` in either finding's evidence."""
    if cause is symptom:
        return False
    theirs = symptom.get("evidence") if isinstance(symptom.get("evidence"), dict) else {}
    by = theirs.get("explained_by")
    if isinstance(by, (list, tuple)) and cause.get("code") in by:
        return True
    mine = cause.get("evidence") if isinstance(cause.get("evidence"), dict) else {}
    named = mine.get("explains")
    return isinstance(named, (list, tuple)) and any(
        isinstance(e, dict) and e.get("code") == symptom.get("code") and e.get("module") == symptom.get("module")
        for e in named)


@dataclass(frozen=True)
class Arranged:
    """The findings in page order; for each page position (0-based), the positions of the
    findings it explains (its children, which follow it) and of the one it is placed under."""

    findings: list[dict]
    explains: dict[int, list[int]]
    explained_by: dict[int, int]

    @property
    def grouped(self) -> bool:
        return bool(self.explained_by)


def arrange(findings: list[dict]) -> Arranged:
    n = len(findings)
    parent: dict[int, int | None] = {}
    for j in range(n):                      # the first cause that does not lead back to j
        parent[j] = next((i for i in range(n) if explains(findings[i], findings[j])
                          and j not in ancestors(i, parent)), None)
    children: dict[int | None, list[int]] = {}
    for j in range(n):
        children.setdefault(parent[j], []).append(j)
    tree = {i: _subtree(i, children) for i in range(n)}
    key = (lambda i: (-max(rank(findings[j]) for j in tree[i]), min(tree[i])))
    ordered: list[int] = []
    for r in sorted(children.get(None, []), key=key):
        ordered.extend(_walk(r, children, findings))
    at = {j: pos for pos, j in enumerate(ordered)}
    return Arranged([findings[j] for j in ordered],
                    {at[i]: sorted(at[j] for j in children.get(i, [])) for i in range(n) if children.get(i)},
                    {at[j]: at[parent[j]] for j in range(n) if parent[j] is not None})


def _subtree(i: int, children: dict[int | None, list[int]]) -> list[int]:
    out, todo = [], [i]
    while todo:
        j = todo.pop()
        out.append(j)
        todo.extend(children.get(j, []))
    return out


def _walk(i: int, children: dict[int | None, list[int]], findings: list[dict]) -> list[int]:
    """i, then each finding it explains (most severe first) followed by what that one explains."""
    out = [i]
    for j in sorted(children.get(i, []), key=lambda j: (-rank(findings[j]), j)):
        out.extend(_walk(j, children, findings))
    return out


def lede(arranged: Arranged) -> str:
    """What the order is, in words that are true of this page."""
    if not arranged.grouped:
        return "Most severe first: errors, then warnings, then info."
    return ("Most severe first: errors, then warnings, then info, except that a root cause comes first in "
            "its group, with the findings it explains right after it (marked “explained by”), and the "
            "group ranks with its most severe finding.")
