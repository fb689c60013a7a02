"""The one home of op knowledge: a registry of op rules (leaky/ops/rule.py).

    from leaky import ops
    rule = ops.rule("clip_")              # the clamp rule, by any spelling
    rule = ops.node_rule("ClampBackward1") # ... or by the autograd node it became
    rule.zero.derivative                  # "d/dx clamp(x, lo, hi) = 1 inside [lo, hi] and 0 outside"

Rules are grouped by family, one file each: activations, dead zones, losses, layers,
value-moving ops, arithmetic; calls that are not ops (metadata, graph cuts, init writes)
are in calls.py. `register(OpRule(...))` adds one; every consumer sees it at once.
"""
from __future__ import annotations

from typing import NamedTuple

from leaky.ops import activations, arithmetic, calls, dead_zones, layers, losses, movement  # noqa: F401  (register)
from leaky.ops.reductions import summed_terms
from leaky.ops.activations import LECUN
from leaky.ops.arithmetic import SCALED_LOSS_NODE
from leaky.ops.losses import LOG_PROBABILITIES, LOGITS, PROBABILITIES, VALUES
from leaky.ops.movement import ACCUMULATE, COMPILED
from leaky.ops.rule import (BOUNDS, FILL, IDENTITY, LEAKY, LOG_INPUT, REGISTRY, SOFTMAX_DIM, STRAIGHT_THROUGH, Activation,
                            Init, OpRule, Zone, register)

rule = REGISTRY.rule
node_rule = REGISTRY.node_rule
module_rule = REGISTRY.module_rule
family = REGISTRY.family
registered = REGISTRY.registered
unregister = REGISTRY.unregister
on_change = REGISTRY.on_change
where = REGISTRY.where


def vocabulary() -> tuple[frozenset[str], frozenset[str]]:
    """(op and call spellings, node class prefixes): the words only leaky/ops may spell out."""
    names, nodes = REGISTRY.vocabulary()
    return names | calls.vocabulary(), nodes | {ACCUMULATE, COMPILED}


__all__ = ["ACCUMULATE", "BOUNDS", "FILL", "IDENTITY", "LEAKY", "LECUN", "SCALED_LOSS_NODE", "STRAIGHT_THROUGH", "COMPILED", "LOGITS", "LOG_INPUT", "LOG_PROBABILITIES", "PROBABILITIES",
           "SOFTMAX_DIM", "VALUES", "Activation", "Init", "NodeTraits", "OpRule", "REGISTRY", "Traits", "Zone", "calls",
           "family", "module_rule", "node_rule", "node_traits", "on_change", "register", "registered",
           "rule", "summed_terms", "traits", "unregister",
           "vocabulary", "where"]


# -- questions the recorder and the checks ask, by op spelling or by node class name ----------
def keeps_finite(op: str) -> bool:
    """The op's output is finite whenever every input is. NOTE: not its in-place spellings:
    their input is gone, so what they wrote is checked."""
    found = rule(op)
    return found is not None and found.keeps_finite and not op.endswith("_")


def selects(op: str) -> bool:
    found = rule(op)
    return found is not None and found.selects


def is_matmul(op: str) -> bool:
    found = rule(op)
    return found is not None and found.matmul


def activation(op: str) -> Activation | None:
    found = rule(op)
    return None if found is None else found.activation


def loss_expects(op: str) -> str | None:
    found = rule(op)
    return None if found is None else found.loss


def layer_kind(op: str) -> str | None:
    found = rule(op)
    return None if found is None else found.layer


class Traits(NamedTuple):
    """What the recorder asks of an op at each of its calls, answered once per spelling (traits)."""

    rule: OpRule | None
    keeps_finite: bool
    selects: bool
    matmul: bool
    activation: Activation | None
    loss: str | None
    layer: str | None


_traits: dict[str, Traits] = {}
on_change(_traits.clear)


def traits(op: str) -> Traits:
    """The answers of keeps_finite, selects, is_matmul, activation, loss_expects and
    layer_kind for `op`, from one lookup (the recorder asks them of every op it sees)."""
    found = _traits.get(op)
    if found is None:
        found = _traits[op] = Traits(rule(op), keeps_finite(op), selects(op), is_matmul(op), activation(op),
                                     loss_expects(op), layer_kind(op))
    return found


class NodeTraits(NamedTuple):
    """What the backward recorder asks of an autograd node class, answered once per class."""

    accumulates: bool          # AccumulateGrad: a parameter's gradient lands here
    passes_gradient: bool
    counts_zeros: bool
    zeros_on_purpose: bool
    moves_values: bool         # always (moves_values may also say yes for one node: moves_values_when)
    moves_when: object         # the rule's per-node test, or None
    elementwise: bool          # each output element depends only on the inputs at its place
    saturates: bool            # a sigmoid-like nonlinearity: its derivative has a maximum and flat tails


_node_traits: dict[type, NodeTraits] = {}
on_change(_node_traits.clear)


def node_traits(kind: type) -> NodeTraits:
    """NodeTraits of the autograd node class `kind` (type(node)), from one lookup."""
    found = _node_traits.get(kind)
    if found is None:
        name = kind.__name__
        rule_ = node_rule(name)
        found = _node_traits[kind] = NodeTraits(
            name == ACCUMULATE, passes_gradient(name), counts_zeros(name), zeros_on_purpose(name),
            rule_ is not None and rule_.moves_values,
            None if rule_ is None else rule_.extra.get("moves_values_when"),
            rule_ is not None and rule_.elementwise,
            rule_ is not None and rule_.activation is not None and rule_.activation.max_derivative is not None)
    return found


def elementwise(node) -> bool:
    """The autograd node's output elements each depend only on the inputs at their place
    (record/bypass.py walks through these)."""
    return node_traits(type(node)).elementwise


def saturates(node) -> bool:
    """The autograd node is a sigmoid-like nonlinearity's (sigmoid, tanh): flat tails."""
    return node_traits(type(node)).saturates


def counts_zeros(node: str) -> bool:
    found = node_rule(node)
    return found is not None and found.counts_zeros


def drops_outputs(op: str) -> bool:
    """A clamp or a step: on the loss path each element it zeroes is one output's whole
    signal, so LK106 weighs what it zeroes by the gradient mass too (not a mask: where and
    masked_fill select by design)."""
    found = rule(op)
    return found is not None and found.zero is not None and found.zero.kind in ("clamp", "step")


def loss_neutral(op: str) -> str | None:
    """What a neutral output layer scores on this loss (losses.py: classes, prior, mean)."""
    found = rule(op)
    return None if found is None else found.extra.get("neutral")


def zeros_on_purpose(node: str) -> bool:
    """Its backward sets elements to exactly 0 by design (a ReLU's off units, a clamp's or a
    mask's zone, dropout), not by rounding a smooth derivative (a saturated tanh, sigmoid or
    softmax, whose exact zeros are precision lost)."""
    found = node_rule(node)
    if found is None or not found.counts_zeros:
        return False
    act = found.activation
    return act is None or not (act.derivative_share is not None or act.rows)


def chooses(node: str) -> bool:
    """An elementwise max/min of two tensors: each element takes one branch's gradient."""
    found = node_rule(node)
    return found is not None and found.chooses


def mixes(node: str) -> bool:
    """The node is a matrix product or a convolution: the gradient of each output element
    reaches many input elements, so a zero below it is one path among many (LK106)."""
    found = node_rule(node)
    return found is not None and found.mixes


def passes_gradient(node: str) -> bool:
    """A node of a chain that carries a parameter's gradient on to AccumulateGrad unchanged in
    meaning (a transpose, a view, an autocast copy)."""
    found = node_rule(node)
    return found is not None and found.passes_gradient


def moves_values(node) -> bool:
    """The node's backward sends exactly the arriving values, plus zeros (see movement.py)."""
    found = node_traits(type(node))
    return found.moves_values or (found.moves_when is not None and found.moves_when(node))


def keeps_scores(node) -> bool:
    """The node hands its input on unchanged in scale: it moves values or masks some out
    (a view, a transpose, masked_fill). LK101 walks back through these from a softmax to the
    op that computed its scores."""
    found = node_rule(type(node).__name__)
    return moves_values(node) or (found is not None and found.selects)


def scaled_input(node) -> tuple[object, object, int] | None:
    """(the node of the input, c, p) when this autograd node only multiplies one input by a
    single number, c**p (logits / temperature, logit_scale * logits, −x): c is a 0-d tensor or
    a number, p is 1 or −1. None where it does more, or is no such node."""
    found = node_rule(type(node).__name__)
    scaled = None if found is None or found.scales is None else found.scales(node)
    if scaled is None:
        return None
    index, factor, power = scaled
    nexts = node.next_functions
    if index >= len(nexts) or nexts[index][0] is None:
        return None
    return nexts[index][0], factor, power


def only_moves(node: str) -> bool:
    """By its class name alone, the node only moves or reshapes values."""
    found = node_rule(node)
    return found is not None and (found.moves_values or found.passes_gradient)


def feeds_units(node: str) -> bool:
    """The node makes a conv or norm feature map, whose units are its channels."""
    found = node_rule(node)
    return found is not None and found.feeds_units


def rnn_step(node: str) -> bool:
    """The node of nn.RNN's per-time-step nonlinearity (tanh or relu, first overload)."""
    found = node_rule(node)
    return found is not None and found.extra.get("rnn_step", False) and node.endswith("Backward0")


def with_replacement(kind: str) -> list[OpRule]:
    """The rules whose op `leaky fix` replaces the way `kind` says (STRAIGHT_THROUGH, LEAKY, IDENTITY)."""
    return [r for r in REGISTRY.rules() if r.replacement == kind]


def init_for(family_name: str | None) -> Init:
    """What a layer feeding this activation family wants (lecun: what follows is linear)."""
    found = family(family_name)
    return found.init if found is not None and found.init is not None else LECUN


def over_batch(op: str) -> bool:
    """A normaliser whose statistics can be the batch's (batch norm): it mixes by design."""
    found = rule(op)
    return found is not None and bool(found.extra.get("over_batch"))


def batch_mixing_fix(op: str, dim: int | None) -> str:
    """LK306: how to keep the batch apart where `op` first mixes it (its output's dim `dim`
    has the batch's size)."""
    found = rule(op)
    if found is not None and found.moves_values:
        return (f"`{op}` reinterprets the memory order, so it does not move the batch dim: to put the batch "
                "elsewhere (a time-major RNN), use x.transpose(0, 1) or x.permute(...), and reshape only dims that "
                "stay together (or give the RNN batch_first=True).")
    if found is not None and (found.normaliser or found.normalises or found.detail == SOFTMAX_DIM):
        return (f"normalise over the features (dim=-1, or dim=1 for channels), not over dim {dim}, which holds the "
                f"batch: `{op}` over the batch makes each sample's output depend on the others.")
    if found is not None and (found.matmul or found.mixes):
        return (f"`{op}` contracts over the batch: check the operands' order and transposes so that it contracts "
                "over features (x @ W.T, einsum('bi,ij->bj', x, W)), and for attention that the sequence dim, "
                "not the batch, is the one attended over (batch_first=True on nn.MultiheadAttention).")
    return (f"combine over the feature dims with `{op}`, keeping dim {dim} (the batch) apart: a sample's "
            "output must depend on that sample only.")
