"""An op rule: everything leaky knows about one op, registered once, found by any spelling.

Modelled on torch/utils/flop_counter.py's `register_flop_formula`: a rule is registered
under its canonical name (the torch function the user calls: "clamp"), and is found by
every other spelling of the same op (its in-place and alias forms: "clamp_", "clip",
"clip_") and by the autograd node classes it becomes ("ClampBackward1", "ClampMinBackward0").
Recording, the checks and `leaky fix` read op knowledge from here and nowhere else.

Adding a dead-zone op (hardshrink, say) is one `register(OpRule(...))` with its node
classes and its `zero` facet: the recorder then counts the zeros of its gradient, LK106
judges them, and LK106's message quotes the rule's derivative.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class Zone:
    """Where an op's local derivative is exactly 0 on a share of elements: a dead zone."""

    kind: str                      # "clamp" | "step" | "select" | "softmax1" | "bounded": how LK106 measures it
    derivative: str                # the derivative, written out, for LK106's message
    fix: str                       # what to do instead


@dataclass(frozen=True)
class Init:
    """The initialisation a layer feeding a nonlinearity wants (LK302, LK101, leaky fix)."""

    fan: str            # "kaiming": std sqrt(2 / fan_in); "xavier": sqrt(2 / (fan_in + fan_out)); "lecun": sqrt(1 / fan_in)
    gain: str           # nn.init.calculate_gain's name for it, used by leaky fix's re-initialisation
    kaiming_gain: bool = False   # leaky fix re-initialises with kaiming_normal_(nonlinearity=gain)

    def std(self, fan_in: int, fan_out: int) -> float:
        if self.fan == "kaiming":
            return math.sqrt(2.0 / fan_in)
        if self.fan == "xavier":
            return math.sqrt(2.0 / (fan_in + fan_out))
        return math.sqrt(1.0 / fan_in)

    @property
    def text(self) -> str:
        """How to write it, for a finding's fix."""
        if self.fan == "kaiming":
            return f"nn.init.kaiming_normal_(layer.weight, nonlinearity='{self.gain}')"
        if self.fan == "xavier":
            return "nn.init.xavier_normal_(layer.weight)"
        return "nn.init.kaiming_normal_(layer.weight, nonlinearity='linear')"


@dataclass(frozen=True)
class Activation:
    """How per-unit statistics read a nonlinearity's output (record/activations.py)."""

    family: str                                   # its family's name, as ActivationStats reports it
    # the local derivative as a share of its maximum, computed from the OUTPUT
    derivative_share: Callable[[Any], Any] | None = None
    can_die: bool = False                         # ReLU family: a unit can be silent for good
    nonnegative: bool = False                     # outputs are never below 0 (relu, not threshold)
    max_derivative: float | None = None           # the derivative's maximum (sigmoid 1/4, tanh 1)
    formula: str | None = None                    # its local derivative and that maximum, in words
    # the |z| beyond which its derivative is below the share c of that maximum (sigmoid ~5.99 at
    # c = 0.01): where its flat region begins, for a pre-activation scale to be judged against
    flat_beyond: Callable[[float], float] | None = None
    init: Init | None = None                      # what a layer feeding it wants (None: lecun, gain linear)
    rows: bool = False                            # a softmax: judged per row (peaked rows), not per unit
    bounded: bool = False                         # flat outside [lo, hi] read from the call (hardtanh)
    # the tensor whose values are judged, from (output, args, kwargs), when it is not the output
    # itself (gumbel_softmax(hard=True) returns a one-hot whose gradient is its soft sample's);
    # None: nothing to judge in this call
    judged: Callable[[Any, tuple, dict], Any] | None = None


@dataclass(frozen=True)
class OpRule:
    name: str                                     # canonical: the torch function the user calls
    aliases: tuple[str, ...] = ()                 # in-place, method and alias spellings of the same op
    nodes: tuple[str, ...] = ()                   # autograd node class name prefixes it becomes
    derivative: str | None = None                 # its local derivative, written out
    zero: Zone | None = None                      # a dead zone: where the derivative is exactly 0
    counts_zeros: bool = False                    # its backward can zero elements: count them (cheap gate)
    bounds: Callable[[tuple, dict], tuple] | None = None   # (low, high) read from the call
    activation: Activation | None = None          # per-unit statistics of its output
    replacement: str | None = None                # STRAIGHT_THROUGH | LEAKY | IDENTITY: how leaky fix replaces it
    moves_values: bool = False                    # backward only moves the arriving values (views, slices)
    passes_gradient: bool = False                 # a chain of these ending in AccumulateGrad carries a weight's grad
    keeps_finite: bool = False                    # its output is finite whenever every input is
    selects: bool = False                         # masks by selection: an -inf fill is intended
    loss: str | None = None                       # a loss: what its first argument must be
    layer: str | None = None                      # "linear" | "conv": a layer with a weight argument
    matmul: bool = False                          # a matrix product (a recurrence's W_hh @ h)
    mixes: bool = False                           # each output's gradient reaches many inputs (matmul, conv)
    chooses: bool = False                         # elementwise max/min of two tensors: picks a branch per element
    # each output element depends only on the input elements at its own place (broadcast aside):
    # record/bypass.py walks down through these to find a saturating op's own input going around it
    elementwise: bool = False
    # only scales: given one of its nodes, (the index in next_functions of the input it multiplies
    # by a single number c, c, p) for x * c**p (x / 0.1, logit_scale * x, -x); None where it does more
    scales: Callable[[Any], tuple[int, Any, int] | None] | None = None
    normaliser: tuple[int, int] | None = None     # batch/layer/group norm: weight and bias positions
    output_range: tuple[float, float] | None = None   # a bounded output (sigmoid [0, 1], tanh [-1, 1], relu [0, inf))
    normalises: bool = False                      # applies the normalisation a logits loss applies again
    clips: bool = False                           # its output is never negative: logits fed through it cannot be
    trap: tuple[str, str] | None = None           # LK107: why its backward can be infinite, and the fix
    feeds_units: bool = False                     # a node whose output is a conv/norm feature map (units by channel)
    detail: str | None = None                     # what of the call to keep: SOFTMAX_DIM | LOG_INPUT | BOUNDS
    module: str | None = None                     # the nn.Module class that applies it (nn.Softmax: softmax)
    extra: dict = field(default_factory=dict)     # anything a single consumer needs (documented there)

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


# how `leaky fix` replaces an op (OpRule.replacement)
STRAIGHT_THROUGH = "straight-through"   # forward the op, backward the identity: x + (op(x) - x).detach()
LEAKY = "leaky-relu"                    # a ReLU swapped for LeakyReLU(0.01)
IDENTITY = "identity"                   # removed: a softmax or sigmoid before a loss that applies its own

# what `OpRule.detail` asks the recorder to keep of a call
SOFTMAX_DIM = "dim"         # the dim a softmax normalises over, and its size
LOG_INPUT = "input_node"    # the node that made a log's input
BOUNDS = "bounds"           # a clamp's or hardtanh's (low, high)
FILL = "fill"               # a masked_fill's value (-inf before a softmax masks its entries out)


class Registry:
    """Rules by spelling and by node class, with caches that a new rule clears."""

    def __init__(self) -> None:
        self._by_name: dict[str, OpRule] = {}
        self._by_module: dict[str, OpRule] = {}
        self._families: dict[str, Activation] = {}
        self._rules: list[OpRule] = []
        self._node_cache: dict[str, OpRule | None] = {}
        self._listeners: list[Callable[[], None]] = []
        self.version = 0

    def register(self, rule: OpRule) -> OpRule:
        for spelling in rule.spellings:
            if spelling in self._by_name:
                raise ValueError(f"op {spelling!r} already has a rule ({self._by_name[spelling].name})")
        for spelling in rule.spellings:
            self._by_name[spelling] = rule
        if rule.module is not None:
            self._by_module[rule.module] = rule
        if rule.activation is not None:
            self._families.setdefault(rule.activation.family, rule.activation)
        self._rules.append(rule)
        self._changed()
        return rule

    def unregister(self, rule: OpRule) -> None:
        for spelling in rule.spellings:
            if self._by_name.get(spelling) is rule:
                del self._by_name[spelling]
        self._rules = [r for r in self._rules if r is not rule]
        if rule.module is not None and self._by_module.get(rule.module) is rule:
            del self._by_module[rule.module]
        self._changed()

    @contextlib.contextmanager
    def registered(self, rule: OpRule) -> Iterator[OpRule]:
        """A rule for the length of a block (tests)."""
        self.register(rule)
        try:
            yield rule
        finally:
            self.unregister(rule)

    def on_change(self, clear: Callable[[], None]) -> None:
        """Run `clear` whenever a rule is added or removed (a consumer's cache)."""
        self._listeners.append(clear)

    def _changed(self) -> None:
        self._node_cache.clear()
        self.version += 1
        for clear in self._listeners:
            clear()

    def rule(self, op: str | None) -> OpRule | None:
        """The rule of an op by any of its spellings."""
        return self._by_name.get(op) if op else None

    def module_rule(self, module_type: str | None) -> OpRule | None:
        """The rule of the op an nn.Module class applies (by its class name, e.g. "Softmax")."""
        return self._by_module.get(module_type) if module_type else None

    def family(self, name: str | None) -> Activation | None:
        """An activation family by the name ActivationStats reports (its first registered rule's)."""
        return self._families.get(name) if name else None

    def node_rule(self, node: str | None) -> OpRule | None:
        """The rule of an autograd node class (by its name, e.g. "ClampBackward1")."""
        if not node:
            return None
        cache = self._node_cache
        if node in cache:
            return cache[node]
        best, length = None, 0
        for rule in self._rules:
            for prefix in rule.nodes:
                if node.startswith(prefix) and len(prefix) > length:
                    best, length = rule, len(prefix)
        cache[node] = best
        return best

    def rules(self) -> tuple[OpRule, ...]:
        return tuple(self._rules)

    def where(self, predicate: Callable[[OpRule], bool]) -> frozenset[str]:
        """Every spelling of the ops whose rule satisfies `predicate`."""
        return frozenset(s for rule in self._rules if predicate(rule) for s in rule.spellings)

    def vocabulary(self) -> tuple[frozenset[str], frozenset[str]]:
        """(op spellings, node class prefixes): the words only leaky/ops may spell out."""
        nodes = frozenset(p for rule in self._rules for p in rule.nodes) | frozenset(self._by_module)
        return frozenset(self._by_name), nodes


REGISTRY = Registry()
register = REGISTRY.register
