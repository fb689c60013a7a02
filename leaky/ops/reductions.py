"""How many terms a loss adds up.

    L = Σ_{i<n} l_i          its value, and the norm of its gradient, grow with n

A loss that sums a different number of terms at each step (an episode's per-step terms,
`torch.cat(policy_losses).sum()`, one episode per step) is not one quantity from step to
step: a long episode's loss and gradient are larger because there are more terms, not
because training diverges. Read at the loss's root: a full sum, or such sums added,
subtracted or negated. A mean divides by n itself; a sum scaled by a number may already
have been divided by its n: neither is counted.
"""
from __future__ import annotations

SUM_NODE = "SumBackward0"                                  # x.sum() / torch.sum(x): a full sum
COMBINE_NODES = ("AddBackward0", "SubBackward0", "NegBackward0")   # losses added, subtracted, negated
_DEPTH = 4


def summed_terms(node) -> int | None:
    """The number of terms the loss whose autograd root is `node` sums (the largest full sum
    it adds up), or None when it is not such a sum."""
    return _terms(node, _DEPTH) or None


def _terms(node, depth: int) -> int:
    if node is None or depth < 0:
        return 0
    name = type(node).__name__
    if name == SUM_NODE:
        try:
            sizes = node._saved_self_sym_sizes
        except (RuntimeError, AttributeError):
            return 0
        count = 1
        for size in sizes:
            count *= int(size)
        return count
    if name in COMBINE_NODES:
        return max((_terms(child, depth - 1) for child, _ in node.next_functions), default=0)
    return 0
