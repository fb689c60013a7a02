"""What stands behind a tensor that is cut out of the graph (a `.detach()`, `.numpy()`, an
op with no gradient): the modules whose ops made it, nearest first, and every module whose
parameters it was computed from.

The second answers, from the graph itself, which cut starves which parameters. In a
transformer Block with `x = x + self.attn(self.ln_1(x)).detach()`, the LayerNorm before the
attention is behind the cut and the one before the MLP is not: it runs after the cut, and
only another cut (a `.detach()` of the next block's input) can starve it. Autograd agrees:
with the Block's cut alone, ln_2 gets a gradient.
"""
from __future__ import annotations

from typing import Callable

from torch import Tensor, nn


def producer_sites(tensor: Tensor, site_of: Callable, depth: int = 8) -> list[int]:
    """The recorded sites of the ops that made this tensor, nearest first, followed `depth`
    nodes back (`site_of(node)`: the node's site, or None when unrecorded)."""
    found, frontier, seen = [], [tensor.grad_fn], set()
    for _ in range(depth):
        following = []
        for node in frontier:
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            site = site_of(node)
            if site is not None and site not in found:
                found.append(site)
            following.extend(fn for fn, _ in node.next_functions)
        frontier = following
    return found


def parameters_behind(tensor: Tensor) -> list[Tensor]:
    """Every leaf that requires grad (a parameter) the tensor was computed from: the
    gradient accumulators its whole graph reaches. Walked once per distinct cut."""
    if tensor.grad_fn is None:
        return [tensor] if isinstance(tensor, nn.Parameter) or tensor.requires_grad else []
    found, stack, seen = {}, [tensor.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        leaf = getattr(node, "variable", None)   # AccumulateGrad: the leaf it accumulates into
        if isinstance(leaf, Tensor):
            found.setdefault(id(leaf), leaf)
        stack.extend(fn for fn, _ in node.next_functions)
    return list(found.values())


def graph_behind(tensor: Tensor, site_of: Callable, owner_of: Callable) -> tuple[tuple, int | None, int | None]:
    """What a cut event keeps of the tensor it cut: the modules owning every parameter behind
    it (`owner_of(param)`, None skipped), its place in forward (its node's sequence number,
    which autograd hands out in increasing order; None for a leaf), and its node's site
    (`site_of(node)`): a cut of a tensor whose own backward ran (`losses.append(loss.detach())`)
    starves nothing."""
    owners = tuple(dict.fromkeys(owner for p in parameters_behind(tensor) if (owner := owner_of(p)) is not None))
    node = tensor.grad_fn
    return owners, (None if node is None else node._sequence_nr()), (None if node is None else site_of(node))
