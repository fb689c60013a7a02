"""The ops between the model's output and the loss: where a dead zone drops whole outputs.

A zero a clamp puts into a hidden activation's gradient is one path among many: the next
layer's matrix product spreads each output's gradient over every unit, and the sample
still reaches the parameters through the other units. Between the last layer and the loss
there is no such spread: each element there is one output of one sample (a TD error, a
prediction), and its gradient has no other way back. A dead zone there drops that output's
whole learning signal (LK106 judges it on its own, lower threshold).

At each sampled backward() this walks the loss's graph from its node toward the inputs
and stops at the first node that holds a trainable tensor (a layer, or a leaf the
optimizer trains) or mixes elements (a matrix product or a convolution, frozen ones
too): the sites it reaches before that, whose backward can zero elements, are on the loss
path. The elementwise max/min nodes it meets (`torch.max(loss1, loss2)`) are handed on:
a clamp that one of them sets against its unclipped self is a trust region by design
(PPO's clipped surrogate and value loss, record/clipping.py). The walk is bounded
(`BUDGET` nodes) and reads only the graph, never a value.
"""
from __future__ import annotations

from typing import NamedTuple

from leaky import ops
from leaky.record.gradients import can_zero, leads_to_param

BUDGET = 256   # nodes visited per backward() at most: the loss computation is a few ops


class LossPath(NamedTuple):
    sites: set[int]             # zeroing sites with no layer between them and the loss
    leaves: set[int]            # ids of the leaves reached so (a prediction rebuilt as a leaf)
    choosers: dict[int, object]  # the elementwise max/min nodes met, by site


def is_layer(node, children: list | None = None) -> bool:
    """The node mixes elements (a matrix product, a convolution) or holds a trainable tensor:
    below it, each element is one path among many. `children`: its next functions, if read."""
    if children is None:
        children = [fn for fn, _ in node.next_functions if fn is not None]
    return ops.mixes(type(node).__name__) or any(leads_to_param(fn) for fn in children)


def loss_path_sites(root, mark) -> LossPath:
    """The sites (by `node.metadata[mark]`) of zeroing nodes reached from `root` before any
    layer: nothing that mixes elements or feeds a trainable tensor lies between them and it;
    the ids of the leaves reached so (record/leaves.py); the max/min nodes met, by site."""
    found: set[int] = set()
    leaves: set[int] = set()
    choosers: dict[int, object] = {}
    stack, seen = [root], set()
    while stack and len(seen) < BUDGET:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        children = [fn for fn, _ in node.next_functions if fn is not None]
        site = node.metadata.get(mark)
        if site is not None and ops.chooses(type(node).__name__):
            choosers.setdefault(site, node)
        elif site is not None and can_zero(node):
            found.add(site)
        leaves.update(id(fn.variable) for fn in children if type(fn).__name__ == ops.ACCUMULATE)
        if is_layer(node, children):
            continue   # a layer: below it, each element is one path among many
        stack.extend(children)
    return LossPath(found, leaves, choosers)
