"""Calls that are not ops on the gradient path, by the name torch-function modes see.

- metadata reads, passed straight through the mode;
- calls that leave the autograd graph, and the kind of cut each makes (LK108);
- the nn.init functions, and the in-place writes hand-written initialisation uses: a write
  to a parameter outside any forward is where it was initialised (LK302's `cause`).
"""
from __future__ import annotations

METADATA = frozenset({
    "dim", "size", "stride", "numel", "is_contiguous", "data_ptr", "__len__", "__repr__", "__format__",
    "element_size", "is_floating_point", "is_complex", "storage_offset", "has_names", "__hash__", "__bool__",
    "__index__", "__iter__", "get_device", "__get__"})
CUTS = {"detach": "detach", "detach_": "detach", "numpy": "numpy", "item": "item", "tolist": "tolist"}
DATA = "data"    # `.data`: reaches a mode as the descriptor's __get__
# nn.init's functions (they run their writes under no_grad, so the mode sees their call first)
NN_INIT = frozenset({
    "constant_", "zeros_", "ones_", "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
    "kaiming_normal_", "trunc_normal_", "orthogonal_", "sparse_", "normal_", "uniform_"})
# in-place writes to a parameter that initialise it when no forward is running
INIT_WRITES = NN_INIT | frozenset({
    "fill_", "zero_", "copy_", "mul_", "div_", "add_", "sub_", "abs_", "clamp_", "exponential_", "bernoulli_",
    "random_", "set_"})
LEAF = "leaf_loss"           # backward() on a leaf tensor: every path before it is cut
NO_GRAD = "no_grad"          # an op on a trainable parameter under torch.no_grad()
NONDIFF = "nondiff"          # an op whose output has no gradient though its inputs had one


def vocabulary() -> frozenset[str]:
    return METADATA | frozenset(CUTS) | INIT_WRITES
