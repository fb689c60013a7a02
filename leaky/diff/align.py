"""Which op site of run B is which op site of run A.

A site is a module, an op and a line (report-v1 `ops[]`). Two runs of the same program name
their sites alike; a refactor renames modules and moves lines, and a change swaps an op,
adds one or removes one. Sites are put in forward order on each side and matched as two
sequences (difflib's longest common blocks) on what a rename keeps: the op and the class of
the module that runs it. Inside a stretch that differs, sites are paired one to one in
order, the same module path first: a `gelu` that became a `clamp` is one site whose op
changed; the rest are on one side only.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Pair:
    """One aligned site: its ops[] row in A and in B (None on the side it is missing from)."""

    a: dict | None
    b: dict | None

    @property
    def status(self) -> str:
        if self.a is None:
            return "only_b"
        if self.b is None:
            return "only_a"
        return "changed_op" if self.a["op"] != self.b["op"] else "same"

    @property
    def order(self) -> tuple[float, float]:
        """Where it stands in forward order, on B's side when it has one (for sorting)."""
        side = self.b if self.b is not None else self.a
        return side["_rank"], 0 if self.b is not None else 1


def module_types(report: dict) -> dict[str, str]:
    """Module path -> class name, from a report's `modules[]`."""
    return {row["module"]: row.get("type") or "" for row in report.get("modules") or []}


def align_reports(a: dict, b: dict) -> list[Pair]:
    """`align` on two reports' sites."""
    return align(a.get("ops") or [], b.get("ops") or [], module_types(a), module_types(b))


def _token(op: dict, types: dict[str, str]) -> tuple:
    return op["op"], types.get(op.get("module") or "", "")


def _ranked(ops: list[dict]) -> list[dict]:
    """The sites in forward order, each given its relative place `_rank` in [0, 1]."""
    # NOTE: `position` (the place in one step's forward), where the report has it: `order` is
    # when a site was first made, so a dropout that first runs at step 8 would sort last
    ordered = sorted(ops, key=lambda op: (op["position"] if op.get("position") is not None else op.get("order") or 0,
                                          op["site"]))
    last = max(len(ordered) - 1, 1)
    return [dict(op, _rank=i / last) for i, op in enumerate(ordered)]


def align(a_ops: list[dict], b_ops: list[dict], a_types: dict[str, str] | None = None,
          b_types: dict[str, str] | None = None) -> list[Pair]:
    """Every site of either run, paired where they correspond, from the loss toward the
    inputs (last forward op first). `*_types`: module path -> class name (report `modules[]`)."""
    a, b = _ranked(a_ops), _ranked(b_ops)
    a_tokens = [_token(op, a_types or {}) for op in a]
    b_tokens = [_token(op, b_types or {}) for op in b]
    pairs: list[Pair] = []
    matcher = difflib.SequenceMatcher(None, a_tokens, b_tokens, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs.extend(Pair(x, y) for x, y in zip(a[i1:i2], b[j1:j2]))
        else:
            pairs.extend(_pair_stretch(a[i1:i2], b[j1:j2]))
    pairs.sort(key=lambda pair: pair.order, reverse=True)
    return pairs


def _pair_stretch(a: list[dict], b: list[dict]) -> list[Pair]:
    """A stretch that differs: the same module path paired first, then in order while both
    sides last; what is left is on one side only."""
    pairs: list[Pair] = []
    left_b = list(b)
    left_a: list[dict] = []
    for x in a:
        same = next((y for y in left_b if x.get("module") and y.get("module") == x.get("module")), None)
        if same is not None:
            left_b.remove(same)
            pairs.append(Pair(x, same))
        else:
            left_a.append(x)
    if len(left_a) == len(left_b):
        pairs.extend(Pair(x, y) for x, y in zip(left_a, left_b))
    else:
        pairs.extend(Pair(x, None) for x in left_a)
        pairs.extend(Pair(None, y) for y in left_b)
    return pairs
