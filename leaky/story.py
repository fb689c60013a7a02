"""One root cause, one story: which findings explain which, and the order they are read in.

A finding explains another when its code is in the other's evidence `explained_by` (a flat
loss names the leaks that flatten it), or when it names the other's code and module in its
own evidence `explains` (inputs that saturate a layer). A finding explained by nothing is a
root; everything it explains, directly or through another finding, is its story. A symptom
with several causes is told under the first of them in severity order (one that would lead
back to itself is skipped).

Stories go most severe first, each ranked by its most severe finding (a warning that explains
an error ranks with the errors); within a story the root comes first, then what it explains,
most severe first, each followed by what it explains in turn. The JSON report lists findings
in this order, the terminal shows each story's root in full with what it explains under it,
and the HTML page groups them the same way (report/html/order.py, on the JSON's dicts).
"""
from __future__ import annotations

from leaky.finding import Finding


def explains(cause: Finding, symptom: Finding) -> bool:
    """Whether `cause` is named as a cause of `symptom` in either finding's evidence."""
    if cause is symptom:
        return False
    if cause.code in (symptom.evidence.get("explained_by") or ()):
        return True
    return any(isinstance(e, dict) and e.get("code") == symptom.code and e.get("module") == symptom.module
               for e in cause.evidence.get("explains") or ())


def stories(findings: list[Finding]) -> list[tuple[Finding, list[Finding]]]:
    """Each root finding with the findings it explains (directly or not), in reading order."""
    ranked = sorted(findings, key=_rank_key)
    parent = _parents(ranked)
    children: dict[int | None, list[int]] = {}
    for j in range(len(ranked)):
        children.setdefault(parent[j], []).append(j)

    def walk(i: int) -> list[int]:
        out = [i]
        for j in children.get(i, []):      # already most severe first: `ranked` is
            out.extend(walk(j))
        return out

    told = [walk(r) for r in children.get(None, [])]
    told.sort(key=lambda story: (-max(ranked[j].severity.rank for j in story), story[0]))
    return [(ranked[story[0]], [ranked[j] for j in story[1:]]) for story in told]


def story_order(findings: list[Finding]) -> list[Finding]:
    """The findings in reading order: each root, then the findings it explains."""
    return [f for root, rest in stories(findings) for f in (root, *rest)]


def told_under(findings: list[Finding]) -> dict[int, Finding]:
    """For each finding that another explains (by `id`), the one it is told under: its parent
    in the story tree. A root is not in it."""
    ranked = sorted(findings, key=_rank_key)
    parent = _parents(ranked)
    return {id(ranked[j]): ranked[i] for j, i in parent.items() if i is not None}


def _rank_key(f: Finding) -> tuple:
    return -f.severity.rank, f.code, f.module or "", f.source.line if f.source else 0


def _parents(ranked: list[Finding]) -> dict[int, int | None]:
    """For each finding, the first finding (in severity order) that explains it and does not
    lead back to it; None for a root."""
    parent: dict[int, int | None] = {}
    for j, symptom in enumerate(ranked):
        parent[j] = next((i for i, cause in enumerate(ranked)
                          if explains(cause, symptom) and j not in ancestors(i, parent)), None)
    return parent


def ancestors(i: int, parent: dict[int, int | None]) -> set[int]:
    """i and the findings above it in the story tree (`parent`: finding -> the one explaining it)."""
    seen = {i}
    while parent.get(i) is not None and parent[i] not in seen:
        i = parent[i]
        seen.add(i)
    return seen
