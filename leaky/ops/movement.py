"""Ops that only move values: views, transposes, slices, copies, joins, max-pools, gathers.

Their backward sends the arriving values into place (and zeros around them), so:
- a gradient they send has the norm of what arrived (record/gradients.py takes no norm);
- a chain of them ending in AccumulateGrad carries a parameter's gradient (a weight's
  transpose, an autocast copy), not an activation's;
- the producer of a loss input is looked for through them;
- their output is finite whenever their inputs are (no second NaN check).
A max-pool moves values only when its windows do not overlap (stride >= kernel, no
dilation): then each window's one gradient goes to its own argmax.
"""
from __future__ import annotations

from leaky.ops.rule import OpRule, register

ACCUMULATE = "AccumulateGrad"   # the node that adds a gradient into a parameter's .grad
COMPILED = "CompiledFunctionBackward"   # the one autograd node of a torch.compile'd graph


def pool_moves_values(node) -> bool:
    kernel, stride = tuple(node._saved_kernel_size), tuple(node._saved_stride) or tuple(node._saved_kernel_size)
    return (all(d == 1 for d in node._saved_dilation) and len(stride) == len(kernel)
            and all(s >= k for s, k in zip(stride, kernel)))


# (op spellings, node prefixes, moves values, passes a parameter's gradient, keeps finite)
_VIEWS = (
    (("view",), ("ViewBackward",), True, True, True),
    (("reshape",), ("ReshapeAliasBackward",), True, True, True),
    (("flatten", "unflatten"), ("UnsafeViewBackward",), True, True, True),
    (("transpose",), ("TransposeBackward",), True, True, True),
    (("permute", "movedim"), ("PermuteBackward",), True, True, True),
    (("squeeze",), ("SqueezeBackward",), True, True, True),
    (("unsqueeze",), ("UnsqueezeBackward",), True, True, True),
    (("t",), ("TBackward",), True, True, True),
    (("clone", "contiguous"), ("CloneBackward",), True, True, True),
    (("alias",), ("AliasBackward",), True, True, False),
    (("select", "getitem"), ("SelectBackward",), True, True, True),
    (("narrow",), ("SliceBackward",), True, True, True),
    (("split", "chunk"), ("SplitBackward", "SplitWithSizesBackward"), True, False, True),
    (("unbind",), ("UnbindBackward",), True, False, True),
    (("expand", "expand_as"), ("ExpandBackward",), False, True, True),
    # NOTE: a cast to a narrower dtype can overflow (1e5 is inf in float16): not finite-keeping
    (("to",), ("ToCopyBackward",), False, True, False),
)
for _spellings, _nodes, _moves, _passes, _finite in _VIEWS:
    register(OpRule(_spellings[0], _spellings[1:], _nodes, moves_values=_moves, passes_gradient=_passes,
                    keeps_finite=_finite))
register(OpRule("max_pool2d", ("max_pool1d", "max_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
                               "adaptive_max_pool3d"),
                ("MaxPool1DWithIndicesBackward", "MaxPool2DWithIndicesBackward", "MaxPool3DWithIndicesBackward"),
                keeps_finite=True, extra={"moves_values_when": pool_moves_values}))
for _name, _aliases in (("cat", ("concat", "concatenate")), ("stack", ()), ("flip", ()), ("roll", ())):
    register(OpRule(_name, _aliases, keeps_finite=True))
register(OpRule("index_select", (), ("IndexSelectBackward",), keeps_finite=True, counts_zeros=True))
register(OpRule("gather", (), ("GatherBackward",), keeps_finite=True, counts_zeros=True))
# NOTE: "Index" covers every indexing node (IndexBackward, IndexPutBackward, ...): each can
# send zeros to the elements it did not pick.
register(OpRule("index", ("index_put", "index_put_"), ("Index",), counts_zeros=True))
