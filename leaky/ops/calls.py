"""Calls that are not ops on the gradient path, by the name torch-function modes see.

- metadata reads, passed straight through the mode;
- calls that leave the autograd graph, and the kind of cut each makes (LK108): what the
  cut is called in a message, and how to undo it;
- the nn.init functions, and the in-place writes hand-written initialisation uses: a write
  to a parameter outside any forward is where it was initialised (LK302's `cause`).
"""
from __future__ import annotations

from dataclasses import dataclass

METADATA = frozenset({
    "dim", "size", "stride", "numel", "is_contiguous", "data_ptr", "__len__", "__repr__", "__format__",
    "element_size", "is_floating_point", "is_complex", "storage_offset", "has_names", "__hash__", "__bool__",
    "__index__", "__iter__", "get_device", "__get__"})


@dataclass(frozen=True)
class CutKind:
    what: str     # the cut, as a message names it
    fix: str      # how to keep the path to the loss


# The kinds of cut, in the order LK108 prefers them when several could explain one module.
DETACH, DATA, NUMPY, ITEM, TOLIST = "detach", "data", "numpy", "item", "tolist"
NO_GRAD = "no_grad"          # an op on a trainable parameter under torch.no_grad()
NONDIFF = "nondiff"          # an op whose output has no gradient though its inputs had one ("nondiff:<op>")
LEAF = "leaf_loss"           # backward() on a leaf tensor: every path before it is cut
REBUILT = "rebuilt_leaf"     # a new leaf with requires_grad=True that a loss reached (not trained by an optimizer)
CUT_KINDS: dict[str, CutKind] = {
    REBUILT: CutKind("a new tensor built from detached values with requires_grad=True", "Compute the "
                     "prediction with torch ops on the model's output (keep its graph): torch.tensor(...), "
                     "torch.from_numpy(...) and .requires_grad_() make a new leaf that no parameter is behind, "
                     "so requires_grad=True only hides the cut."),
    DETACH: CutKind(".detach()", "Remove the .detach() (detach only what must not be trained, e.g. a "
                    "target); if you need numpy, compute it from a detached copy next to the graph, not in it."),
    DATA: CutKind(".data", "Use the parameter itself (self.fc.weight), not .data: .data hides the op from "
                  "autograd."),
    NUMPY: CutKind(".numpy()", "Keep the computation in torch; a numpy round trip leaves the graph."),
    ITEM: CutKind(".item()", "Keep the value as a tensor; .item() returns a Python number with no gradient."),
    TOLIST: CutKind(".tolist()", "Keep the values as a tensor; .tolist() leaves the graph."),
    NO_GRAD: CutKind("torch.no_grad()", "Move this call out of the torch.no_grad() block, or freeze these "
                     "parameters on purpose with requires_grad_(False) and drop them from the optimizer."),
    NONDIFF: CutKind("an op with no gradient", "This op's output carries no gradient (a comparison, argmax, "
                     "rounding to an integer dtype): use a differentiable surrogate (e.g. the soft value "
                     "sigmoid(x) instead of (sigmoid(x) > 0.5).float()) on the path to the loss."),
    LEAF: CutKind("backward() on a leaf tensor", "The tensor passed to backward() has no graph behind it "
                  "(setting loss.requires_grad = True hides the cut): find where the graph was cut before "
                  "the loss and keep the loss a function of the model's outputs."),
}
# the calls that can make a new leaf that requires grad (from data, numpy, a list or a
# detached tensor): where the script built one is where LK108 points when a loss reaches it
LEAF_MAKERS = frozenset({
    "tensor", "as_tensor", "asarray", "from_numpy", "requires_grad_", "zeros", "ones", "full", "empty", "rand",
    "randn", "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "arange",
    "linspace", "eye"})
# the calls that make a cut (by the name the mode sees), and the kind of each
CUTS = {"detach": DETACH, "detach_": DETACH, "numpy": NUMPY, "item": ITEM, "tolist": TOLIST}
# nn.init's functions (they run their writes under no_grad, so the mode sees their call first)
NN_INIT = frozenset({
    "constant_", "zeros_", "ones_", "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
    "kaiming_normal_", "trunc_normal_", "orthogonal_", "sparse_", "normal_", "uniform_"})
# in-place writes to a parameter that initialise it when no forward is running
INIT_WRITES = NN_INIT | frozenset({
    "fill_", "zero_", "copy_", "mul_", "div_", "add_", "sub_", "abs_", "clamp_", "exponential_", "bernoulli_",
    "random_", "set_"})


def cut_kind(kind: str) -> CutKind:
    """The kind of a recorded cut ("nondiff:argmax" is a nondiff cut)."""
    return CUT_KINDS[kind.split(":")[0]]


def vocabulary() -> frozenset[str]:
    """The calls only leaky/ops spells out (metadata reads aside: they are ordinary words)."""
    return frozenset(CUTS) | INIT_WRITES | {"from_numpy", "requires_grad_", "as_tensor"}
