"""Stats: what the recorder saw, as frozen host numbers the checks read.

`leaky.derive` produces an `AuditStats` from what `leaky.record` saw; checks and reports
read nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, NamedTuple

from leaky.finding import Source


class SeriesRow(NamedTuple):
    """One optimizer step (a backward call when no optimizer runs), on every step."""

    step: int
    loss: float | None           # the sum of the losses backward() was called on since the last step:
                                 # the objective whose gradient this step applied
    grad_norm: float | None      # total gradient norm of the stepping optimizer's parameters
    lr: float | None             # its first param group's learning rate
    optimizer: int | None = None  # index into AuditStats.optimizers of the optimizer that stepped
    terms: int | None = None      # how many terms the loss summed (x.sum() over n elements; None:
                                  # a mean, or not a sum): ops/reductions.py


@dataclass
class CutEvent:
    """A place where a tensor leaves the autograd graph."""

    kind: str                  # "detach" | "data" | "numpy" | "item" | "tolist" | "no_grad" |
                               # "nondiff:<op>" | "leaf_loss"
    producer: tuple            # module keys of the modules that produced the cut tensor, nearest first
    module: int | None         # module key running when the cut happened
    where: tuple[str, int] | None
    step: int
    reaches: tuple | None = None  # module keys of every parameter the cut tensor was computed
                                  # from, its whole graph (None: no tensor to walk, e.g. no_grad)
    order: int | None = None      # the cut tensor's autograd sequence number: its place in forward
    site: int | None = None       # the site of the cut tensor's node (None: a leaf, or unrecorded)


@dataclass(frozen=True)
class OpStats:
    site: int
    op: str
    node: str
    module: str | None
    module_key: int | None
    source: Source | None
    first_seq: int
    steps: int                   # steps in which its backward ran
    occurrences: float           # backward calls per step (>1: a loop or a shared module)
    grad_in: float | None        # geometric mean over steps of the gradient norm arriving
    grad_out: float | None       # ... leaving toward activations
    grad_param: float | None     # ... leaving toward parameters
    gain: float | None           # geometric mean of grad_out / grad_in
    zeroed_share: float | None   # share of arriving nonzero elements this op zeroed
    nonzero_in: float            # arriving nonzero elements, summed over the steps counted (see RATE_GAP)
    profile: tuple[float, ...] | None   # last step: arriving norm per occurrence, in forward order
    detail: dict[str, Any] = field(default_factory=dict)
    out_rms: float | None = None         # first clean step: root-mean-square of its forward output
    underflow_share: float | None = None  # float16/bfloat16 gradient arriving at a dense op: share exactly 0
    subnormal_share: float | None = None  # ... share below the smallest normal number
    zero_steps: int = 0          # the steps whose zeroed elements were counted (all sampled ones, in an audit)
    loss_path: bool = False      # no layer between it and a loss: each element is one output (LK106)
    # a clamp or step on the loss path: the share of the arriving gradient's mass (Σ|g|, summed
    # over the steps counted) that it sent on as exactly 0 (None: not measured)
    zeroed_mass_share: float | None = None
    # the population standard deviation over steps of log10 of the per-step gain (whose mean
    # gives `gain`): 0 when every step had the same gain (None: fewer than 2 steps)
    gain_spread: float | None = None
    # its place in one step's forward, 0 first: first_seq's order, with a site first seen at a
    # later step placed right after the op recorded before it there (derive: forward_positions)
    position: int | None = None


@dataclass(frozen=True)
class ActivationStats:
    site: int
    op: str
    family: str
    module: str | None
    source: Source | None
    units: int
    samples: int                  # samples per unit observed
    dead_units: int | None        # relu family: never fired in the trailing window
    died_steps: tuple[int, ...]   # for dead units that fired earlier: step after their last firing
    window: int                   # trailing steps used for "dead"
    flat_share: float | None      # unit-samples in a flat region
    stuck_share: float | None     # units flat on >= 99% of their samples
    median_derivative_share: float | None
    peaked_share: float | None    # softmax: rows with max probability > 0.99
    detail: dict[str, Any] = field(default_factory=dict)
    # sigmoid/tanh: counts of log10(local derivative / its maximum) per bin; ReLU family: counts
    # of units per firing rate (share of samples with output > 0). {"kind", "edges", "counts"}
    histogram: dict | None = None
    # for the units of died_steps, in the same order: the first observed step that saw each
    # silent. A watch observes every N-th step, so each died between the two; an audit
    # observes every step, and the two are the same.
    seen_dead_steps: tuple[int, ...] = ()
    window_span: tuple[int, int] | None = None   # first and last observed step of the window
    # softmax, at the first step it ran (normally the initialisation): the share of its rows whose
    # Jacobian trace tr(diag(p) - ppᵀ) = 1 - ||p||² is below flat_derivative_share of the uniform
    # row's 1 - 1/n, and the mean of that share over the rows (rows with one possible entry left out)
    first_flat_share: float | None = None
    first_jacobian_share: float | None = None
    # softmax, over its last observed steps (the trailing window, `window` steps at most): the share
    # of its rows that are flat, the Jacobian share of the mean row (near 0: every row puts its mass
    # on the same entry, a policy collapsed onto one action), and the window's first and last step
    recent_flat_share: float | None = None
    recent_mean_row_share: float | None = None
    recent_span: tuple[int, int] | None = None
    ran_steps: int | None = None   # the observed steps at which this site ran (None: every observed step)
    # samples per unit per call: a batch, or 1 when a step feeds a sequence one sample at a time
    # (an episode's states, tokens): those are consecutive and alike, not independent draws
    samples_per_call: float | None = None
    # sigmoid/tanh whose output is combined (multiplied, added) with another path from its own
    # input, which goes around its flat tails (x·σ(x), 0.5·x·(1 + tanh(u(x)))): the site of that
    # product or sum, the site of the shared input, and the composite's gain, |dL/dx| / |dL/d(out)|
    # (geometric mean over the steps; None: not measured). See record/bypass.py.
    bypass_site: int | None = None
    bypass_input_site: int | None = None
    bypass_gain: float | None = None


@dataclass(frozen=True)
class ParamStats:
    name: str
    module: str | None
    module_key: int | None
    shape: tuple[int, ...]
    requires_grad: bool
    in_optimizer: bool
    grad_steps: int               # steps at whose end it had a .grad
    grad_norm: float | None       # last observed gradient norm
    update_ratio: float | None = None       # median ||dw|| / ||w|| over sampled steps with a gradient
    update_ratio_max: float | None = None
    update_ratios: tuple[tuple[int, float], ...] = ()   # (step, ratio), sampled steps
    zero_update_steps: int = 0    # sampled steps with a nonzero gradient and no change at all
    graded_update_steps: int = 0  # sampled steps with a nonzero gradient and a measured update
    optimizer: int | None = None  # index into AuditStats.optimizers of the optimizer that holds it
    group: int | None = None      # ... and its param group there
    source: Source | None = None  # where it was created (its module's construction, normally)
    created_after_optimizer: bool = False   # created after the first optimizer was built
    loss_change_bound: float | None = None  # median over sampled steps of ||g|| * ||Δw||: at first
                                            # order, the most one step of this parameter changes the loss
    root: str | None = None       # the root model it belongs to (its name, "" for an unnamed one)
    weight_norm: float | None = None   # median ||w|| before a sampled update (||Δw|| / ratio)
    dtype: str | None = None      # its dtype ("float32", "bfloat16", ...)
    # float16/bfloat16: of its elements with a nonzero gradient on the sampled steps, the share the
    # optimizer step left unchanged (the update rounded away); None for other dtypes
    rounded_share: float | None = None


@dataclass(frozen=True)
class SchedulerStats:
    """A learning-rate scheduler: where it was built, its lr function's line, and where and how
    often the script advanced it."""

    kind: str                     # "LambdaLR", "CosineAnnealingLR", ...
    source: Source | None         # where it was constructed
    function_source: Source | None = None   # LambdaLR/MultiplicativeLR: where its lr function gives the factor
    step_source: Source | None = None       # where its step() was called most often
    step_calls: int = 0                     # step() calls while observed (its own first, in __init__, aside)


@dataclass(frozen=True)
class OptimizerStats:
    """An optimizer that stepped: where it was built and driven, and its learning rates."""

    index: int
    kind: str                     # "Adam", "SGD", ...
    source: Source | None         # where it was constructed: where its learning rate was given
    step_source: Source | None    # where its step() is called
    zero_grad_sources: tuple[Source, ...]   # zero_grad() calls that clear its parameters' gradients
    cleared_steps: int            # steps on which a zero_grad() cleared them between backward() and step()
    cleared_source: Source | None  # ... that zero_grad() call
    initial_lrs: tuple[float | None, ...]   # per param group, as constructed
    lr_range: tuple[tuple[float, float] | None, ...]   # per param group: lowest and highest lr, sampled steps
    scheduler: SchedulerStats | None = None
    closure_calls: int = 0        # the most closure evaluations in one step(closure): >1 is a line search (LBFGS)
    name: str | None = None       # the variable the script assigned it to where it was built (`optimizer`)


@dataclass(frozen=True)
class UnsteppedOptimizer:
    """An optimizer built during the run whose step() never ran, and the trained parameters
    it holds (that no optimizer that stepped holds)."""

    kind: str                     # "Adam", "SGD", ...
    source: Source | None         # where it was constructed
    name: str | None              # the variable the script assigned it to there (`decoder_optimizer`)
    params: tuple[str, ...]       # ParamStats.name of the parameters it holds


@dataclass(frozen=True)
class CastStats:
    """Where parameters or ops were put in float16/bfloat16."""

    kind: str                     # "module" (Module.half() / .to(dtype)) | "autocast"
    dtype: str                    # "float16" | "bfloat16"
    source: Source | None
    target: str                   # the module's class name, or the autocast device


@dataclass(frozen=True)
class RecurrenceStats:
    module: str | None
    param: str
    kind: str                     # "rnn_tanh" | "rnn_relu" | "lstm" | "gru" | "loop"
    gated: bool
    spectral_radius: float
    profile: tuple[float, ...] | None   # gradient norm reaching each time step, t = 0 first
    op: OpStats | None
    init_source: Source | None = None   # the user's line that last wrote the weight in place (nn.init.*)


@dataclass(frozen=True)
class NonFinite:
    phase: str                    # "forward" | "backward"
    step: int
    op: OpStats
    value: str                    # "nan" | "inf"
    rank: int | None = None       # distributed: the rank whose data produced it


@dataclass(frozen=True)
class Cut:
    kind: str
    producer: tuple[str | None, ...]
    module: str | None
    source: Source | None
    step: int
    reaches: tuple[str | None, ...] | None = None   # the modules whose parameters feed the cut tensor
    order: int | None = None                        # its place in forward (autograd sequence number)
    site: int | None = None                         # the site of the cut tensor's own node, if recorded


@dataclass(frozen=True)
class LossStats:
    """What reached one loss call: the op that produced its input, ranges, target."""

    site: int
    op: str
    expects: str                  # "logits" | "log-probabilities" | "probabilities" | "values"
    module: str | None
    source: Source | None
    input_node: str | None        # autograd node that produced the input, through views
    input_site: int | None        # the site of that node, when leaky recorded it
    input_shape: tuple[int, ...]
    target_shape: tuple[int, ...] | None
    target_dtype: str | None
    low: float | None             # smallest input value seen
    high: float | None            # largest input value seen
    target_integral: bool | None  # float targets that were all whole numbers
    failed: str | None            # the call raised: its message
    detail: dict[str, Any] = field(default_factory=dict)
    target_low: float | None = None   # float targets' range
    target_high: float | None = None
    # LK307, the first call: "loss" per element, "neutral" (ops.loss_neutral), "classes",
    # "target_mean", "target_var", "target_mad" (E|t - mean|), "target_hard" (all 0 or 1)
    start: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InputStats:
    """Raw data entering a parameterised layer (a tensor that needs no gradient)."""

    site: int
    op: str
    module: str | None
    source: Source | None
    samples: int
    mean: tuple[float, ...]       # per feature (last dim) or channel (conv)
    std: tuple[float, ...]
    made_source: Source | None = None   # the user's line that made the data (or what it came from)


@dataclass(frozen=True)
class WeightStats:
    """A layer weight as first seen in the audit (normally its initialisation)."""

    site: int
    module: str | None
    param: str
    kind: str                     # "linear" | "conv"
    shape: tuple[int, ...]
    fan_in: int
    fan_out: int
    std: float
    rows_identical: bool          # every unit has the same weights (and bias)
    init_source: Source | None = None   # the user's line that last wrote it in place (nn.init.*)


@dataclass(frozen=True)
class FunctionStats:
    """A custom autograd.Function re-checked against finite differences."""

    name: str
    module: str | None
    source: Source | None
    checked: bool
    note: str
    wrong: tuple[dict, ...]       # per wrong input: index, relative_error, analytic, numeric
    backward_source: Source | None = None   # where its backward is defined
    gradient_sources: tuple[Source | None, ...] = ()   # per input: the line of backward computing its gradient


# LK306: mixing by design (BatchMixingStats.by_design)
BATCHNORM_NO_STATS = "batch-norm-without-running-statistics"
GRAPH = "graph-message-passing"
ROUTER = "mixture-of-experts-routing"


@dataclass(frozen=True)
class BatchMixingStats:
    """LK306's probe of one root model (record/batch_mixing.py): does its output for one
    sample depend on other samples of the batch?"""

    model: str                    # the root model's name
    judged: bool                  # the probe ran and some output dim matched an input dim
    mixed: bool
    note: str = ""                # why it was not judged
    point: str = ""               # what was differentiated: "input 0", an embedding's output
    batch: int = 0                # N, the size of the batch dim compared
    row: int = 0                  # the output row whose gradient was read
    reached: int = 0              # other samples that row depends on
    pairs: int = 0                # (input dim, output dim) pairs of size N, all mixing
    op: str | None = None         # where the mixing starts: the first op whose rows mix
    module: str | None = None
    source: Source | None = None
    dim: int | None = None        # the dim of size N of that op's output
    shape: tuple[int, ...] | None = None
    time_major: bool = False      # the op runs in a module built with batch_first=False
    by_design: str | None = None  # batch norm without running statistics, a graph, a router
    batchnorm_eval: tuple[str, ...] = ()   # batch norms probed in eval mode


@dataclass(frozen=True)
class ModuleRow:
    """One module whose ops ran backward: the gradient-flow table's row (derive/modules.py)."""

    module: str                   # its name, or "<script>" for ops outside any module
    type: str                     # its class name ("" for <script>)
    order: int                    # creation order of its entry op: rows sort from the loss end
    start: int                    # creation order of its first op with a measured gradient
    entry_site: int | None        # its latest op in forward order with a measured arriving gradient
    grad_norm: float | None       # the gradient norm entering it from the loss side (its entry op's)
    gain: float | None            # leaving (its earliest op's, toward activations) over entering
    zeroed_share: float | None    # the largest share of arriving gradient one of its ops zeroes
    dead_share: float | None      # the largest share of dead units among its activations
    saturated_share: float | None  # the largest flat share among its activations
    ops: int                      # its op sites that ran backward
    trainable: bool               # it owns a trainable parameter that got a gradient
    recurrent: bool               # it holds a recurrence (its gradient profile is judged by LK105)
    update_ratio: float | None    # the largest median ||dw||/||w|| among its weights


@dataclass(frozen=True)
class AuditStats:
    steps: int
    backward_calls: int
    used_optimizer: bool
    ops: tuple[OpStats, ...]
    activations: tuple[ActivationStats, ...]
    params: tuple[ParamStats, ...]
    recurrences: tuple[RecurrenceStats, ...]
    nonfinite: tuple[NonFinite, ...]
    cuts: tuple[Cut, ...]
    losses: tuple[float, ...]
    grad_norms: tuple[float, ...]
    module_types: dict[str, str] = field(default_factory=dict)
    modules_ran: frozenset = frozenset()
    clean_steps: int = 0          # steps before the first NaN/Inf; per-site statistics cover only these
    losses_seen: tuple[LossStats, ...] = ()
    inputs: tuple[InputStats, ...] = ()
    weights: tuple[WeightStats, ...] = ()
    functions: tuple[FunctionStats, ...] = ()
    loss_scaler: dict | None = None   # a live, enabled GradScaler: {"scale": float}; None if none
    series: tuple[SeriesRow, ...] = ()   # every step, in order
    sample_steps: tuple[int, ...] = ()   # the steps observed in detail
    carried_steps: dict[int, int] = field(default_factory=dict)   # per optimizer: steps that kept old grads
    carry_checked: dict[int, int] = field(default_factory=dict)   # per optimizer: steps checked
    optimizer_modules: dict[int, list[str]] = field(default_factory=dict)   # per optimizer: its modules
    idle_optimizer: bool = False  # a live optimizer holds the trained parameters but never stepped
    optimizers: tuple[OptimizerStats, ...] = ()   # the optimizers that stepped, in order of their first step
    unstepped_optimizers: tuple[UnsteppedOptimizer, ...] = ()   # built, holding trained parameters, never stepped
    casts: tuple[CastStats, ...] = ()
    idle_source: Source | None = None   # idle optimizer: a bare `optimizer.step` statement, or the backward() call
    # (A, B): the loss optimizer A stepped on sent gradient into parameters optimizer B trains
    coupled_optimizers: frozenset = frozenset()
    # steps whose loss was the first after weights outside every optimizer changed (a synced target network)
    target_syncs: tuple[int, ...] = ()
    # weights outside every optimizer held exactly a trained weight's values (a target network or an
    # EMA teacher copied from the model): its targets will move, though no sync was seen yet
    target_copied: bool = False
    # a watch's unsampled step whose loss was NaN/Inf while the model's weights already were
    # (record/replay.py): its forward did not make the NaN, an earlier backward or update did
    weights_nonfinite_at: int | None = None
    compiled_modules: frozenset = frozenset()   # modules inside torch.compile'd code: their ops are not observed
    module_table: tuple[ModuleRow, ...] = ()    # per module that ran backward, from the loss end to the input
    batch_mixing: tuple[BatchMixingStats, ...] = ()   # LK306: per root model probed
    # statistics added by name (derive/fields/): a new capability's field, with no edit here
    derived: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> "AuditStats":
        return cls(0, 0, False, (), (), (), (), (), (), (), ())

    @cached_property
    def _ops_by_site(self) -> dict[int, OpStats]:
        return {op.site: op for op in self.ops}

    def op(self, site: int) -> OpStats | None:
        return self._ops_by_site.get(site)


def thin(profile: tuple[float, ...], most: int = 64) -> tuple[float, ...]:
    """At most `most` evenly spaced points of a long profile, plus the last (JSON stays small)."""
    if len(profile) <= most:
        return tuple(profile)
    stride = len(profile) / most
    return tuple(profile[int(i * stride)] for i in range(most)) + (profile[-1],)


def _source(where) -> Source | None:
    return None if where is None else Source(where[0], where[1])
