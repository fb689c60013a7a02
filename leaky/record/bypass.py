"""Saturating ops whose own input goes around them: the composite activations.

A sigmoid or tanh whose output is multiplied by (or added to) another path from its own input
is one factor of a composite, and its saturation is bypassed:

    swish(x) = x·σ(x)                            d/dx = σ(x) + x·σ(x)(1 − σ(x))
    gelu_tanh(x) = 0.5·x·(1 + tanh(u(x)))        d/dx = 0.5·(1 + t) + 0.5·x·(1 − t²)·u'(x)
    mish(x) = x·tanh(softplus(x))                d/dx = tanh(sp) + x·(1 − tanh²(sp))·σ(x)

Where t = ±1 the tanh's own derivative 1 − t² is ~0, yet d/dx is ~1 or ~0: the gradient reaching
x goes through the other factor, not through the tanh. A gated unit a·σ(b) with a and b computed
apart (two layers, two halves of one split) is no such composite: nothing goes around σ to b.

The composite is found in the graph, never in values: at a product or a sum of two tensors (an
elementwise node with two inputs), each input is walked down through elementwise nodes only
(ops.elementwise: every element stays at its place) to the first node that is not one. Where
one walk passes a saturating node S, and another walk reaches, without passing S, an input edge
(node, output) that the walk below S reaches too, that edge is the shared input, x. The walk is
bounded (DEPTH nodes deep) and done once per site; the sites found are walked again at each
sampled step for the two nodes whose arriving gradients give the composite's gain, |dL/dx| /
|dL/d(out)| (derive/accumulate.py).
"""
from __future__ import annotations

from typing import NamedTuple

from leaky import ops

DEPTH = 8   # elementwise nodes walked below each input: GELU-tanh's deepest path is 6


class Walk(NamedTuple):
    edges: dict        # (id(node), output nr) -> node: every input edge reached
    nodes: set         # ids of the elementwise nodes passed
    saturating: list   # (node, edges below it): the saturating nodes passed


def _walk(node, nr: int, depth: int = DEPTH) -> Walk:
    walk = Walk({}, set(), [])
    _into(walk, node, nr, depth)
    return walk


def _into(walk: Walk, node, nr: int, depth: int) -> None:
    walk.edges[(id(node), nr)] = node
    if depth == 0 or id(node) in walk.nodes or not ops.elementwise(node):
        return
    walk.nodes.add(id(node))
    below = None
    if ops.saturates(node):
        below = _walk_children(node, depth - 1)
        walk.saturating.append((node, below.edges))
        walk.saturating.extend(below.saturating)
        walk.edges.update(below.edges)
        walk.nodes.update(below.nodes)
        return
    for child, child_nr in node.next_functions:
        if child is not None:
            _into(walk, child, child_nr, depth - 1)


def _walk_children(node, depth: int) -> Walk:
    walk = Walk({}, set(), [])
    for child, child_nr in node.next_functions:
        if child is not None:
            _into(walk, child, child_nr, depth)
    return walk


def bypasses(node) -> list[tuple[object, object]]:
    """(saturating node, shared input node) for each saturating node whose input is also
    reached by another input of `node` (a product or sum), around it; [] for any other node."""
    inputs = [(fn, nr) for fn, nr in node.next_functions if fn is not None]
    if len(inputs) < 2 or not ops.elementwise(node):
        return []
    walks = [_walk(fn, nr) for fn, nr in inputs]
    found = []
    for i, walk in enumerate(walks):
        for sat, below in walk.saturating:
            for j, other in enumerate(walks):
                shared = [below[key] for key in below.keys() & other.edges.keys()] if j != i else []
                if shared and id(sat) not in other.nodes:
                    # the nearest shared input: made last (a bias added before it is shared too)
                    found.append((sat, max(shared, key=lambda n: n._sequence_nr())))
                    break
    return found


class BypassFinder:
    """The product and sum sites that combine a saturating op with its own input: found at a
    site's first call, then at each of its calls the pair of nodes to compare.

    `found`: saturating site -> (composite site, shared input site or None), once per run;
    `pairs` (per step, emptied by the caller): (saturating site, composite node seq, shared
    input node seq)."""

    def __init__(self, mark) -> None:
        self.mark = mark
        self.found: dict[int, tuple[int, int | None]] = {}
        self._composites: set[int] = set()
        self._checked: set[int] = set()

    def note(self, site: int, node, pairs: list) -> None:
        """A call of `site`, whose node is `node`: walked when the site is new or a composite."""
        if site in self._checked and site not in self._composites:
            return
        self._checked.add(site)
        for sat, shared in bypasses(node):
            sat_site = sat.metadata.get(self.mark)
            if sat_site is None:
                continue
            shared_site = shared.metadata.get(self.mark)
            self._composites.add(site)
            self.found.setdefault(sat_site, (site, shared_site))
            if self.found[sat_site][0] == site and shared_site is not None:   # a hooked node: its gradient is known
                pairs.append((sat_site, node._sequence_nr(), shared._sequence_nr()))
