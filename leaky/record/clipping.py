"""A clamp set against its own unclipped self: a pessimistic bound, whose zeros are by design.

PPO's clipped surrogate and its clipped value loss (CleanRL's `clip_vloss`, on by default)
take, per sample, the worse of two versions of one quantity:

    max(−A·r, −A·clamp(r, 1 − ε, 1 + ε))                          the policy loss
    max((v − R)², (v_old + clamp(v − v_old, −ε, ε) − R)²)          the value loss

    d/dr = −A                 where the unclipped branch is the larger loss
         = −A·clamp'(r) = 0   where the clipped branch is, and the clamp binds

So where the clamp binds and its branch is chosen, the gradient is 0 on purpose: the sample
has moved as far as the trust region lets it. Structurally: a clamp-like op (one whose
derivative is 0 outside bounds, ops: `zero` with `bounds`) lies in one input of an
elementwise max/min (ops: `chooses`), and the other input reaches the clamp's input, or
what it was made from, without passing through the clamp. Both walks go only through
elementwise ops: they stop at a layer (a node that mixes elements or holds a trainable
tensor), where two outputs of one model stop being one quantity, and they are bounded
(`DEPTH` edges, `BUDGET` nodes).

`note_clipping` answers this once per max/min site, the first time the loss-path walk meets
it (record/loss_path.py), and writes the answer into the sites' details: the max/min's
`clips` (the clamp sites it clips against their unclipped selves) and each such clamp's
`clipped_by` (the max/min's site), which LK106 reads.
"""
from __future__ import annotations

from leaky import ops
from leaky.record.loss_path import is_layer

DEPTH = 6     # edges walked from a max/min input to a clamp, and from a clamp's input to what made it
BUDGET = 64   # nodes visited per walk at most
CLIPS, CLIPPED_BY = "clips", "clipped_by"   # the sites' detail keys (LK106 reads clipped_by)


def note_clipping(sites: list, choosers: dict[int, object], mark) -> None:
    """For each max/min site met for the first time (its node in `choosers`, by site), note
    the clamps it sets against their unclipped selves."""
    for site, node in choosers.items():
        detail = sites[site].detail
        if CLIPS in detail:
            continue   # answered at its first sighting: no cost afterwards
        clamps = clipped_against_self(node, mark)
        detail[CLIPS] = clamps
        for clamp in clamps:
            sites[clamp].detail.setdefault(CLIPPED_BY, site)


def clipped_against_self(chooser, mark) -> list[int]:
    """The sites of the clamps in one input of the max/min node `chooser` whose input (or
    what made it, up to a layer) the other input also reaches, not through the clamp."""
    branches = [fn for fn, _ in chooser.next_functions]
    if len(branches) != 2 or None in branches:
        return []   # max(x, 0): a constant on the other side is a clamp, not a bound against x
    found = []
    for own, other in (branches, branches[::-1]):
        for clamp in _reach(own).values():
            site = clamp.metadata.get(mark)
            if site is None or site in found or not _bounds(clamp):
                continue
            source = clamp.next_functions[0][0] if clamp.next_functions else None
            if source is not None and _reach(source).keys() & _reach(other, avoid=clamp).keys():
                found.append(site)
    return found


def _bounds(node) -> bool:
    """A clamp-like node: its derivative is 0 outside bounds read from the call."""
    rule = ops.node_rule(type(node).__name__)
    return rule is not None and rule.zero is not None and rule.bounds is not None


def _reach(start, avoid=None) -> dict[int, object]:
    """The nodes within DEPTH edges of `start` (itself included), by id: a layer's node is
    kept but not walked below, and `avoid` is not entered."""
    found: dict[int, object] = {}
    frontier = [start]
    for _ in range(DEPTH + 1):
        below = []
        for node in frontier:
            if node is None or node is avoid or id(node) in found or len(found) >= BUDGET:
                continue
            found[id(node)] = node
            children = [fn for fn, _ in node.next_functions if fn is not None]
            if not is_layer(node, children):
                below.extend(children)
        frontier = below
    return found
