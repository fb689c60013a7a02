"""Recorder: owns every instrument for one audit and removes them all on exit.

It counts steps (optimizer steps, or backward calls when no optimizer runs), flushes the
device-side values of each sampled step once, as a typed HostStep, into its sink (a
`derive.StatsBuilder`, given by whoever runs the audit), and stops observing after the
configured number of steps. It observes and records; it computes no statistic.
"""
from __future__ import annotations

import warnings
from contextlib import ExitStack, contextmanager
from typing import Callable

import torch
from torch import Tensor
from torch.optim import optimizer as optim_globals

from leaky import ops
from leaky.config import AuditConfig
from leaky.process.guards import outside_graphs
from leaky.process.heap import FrozenHeap
from leaky.record import instruments
from leaky.record.activations import RATE_GAP, UnitStats, settle_units, unit_dim
from leaky.record.batch_mixing import BatchMixing
from leaky.record.budget import Schedule, ScheduleHost
from leaky.record.bypass import BypassFinder
from leaky.record.compiled import CompiledCalls
from leaky.record.cuts import CutRecords
from leaky.record.feedback import FeedbackUses
from leaky.record.forward import ForwardTaps
from leaky.record.functions import CustomFunctions
from leaky.record.gradients import GradientRecorder, leads_to_param, slot_kinds
from leaky.record.leaves import MadeLeaves
from leaky.record.modules import ModuleTracker
from leaky.record.monitor import StepMonitor, TeardownPatch, TensorBackwardPatch, UpdateMeter
from leaky.record.objectives import CouplingMeter, MovingWeights
from leaky.record.opmode import OpMode
from leaky.record.origins import OriginRecords
from leaky.record.params import ParamTable
from leaky.record.provenance import Provenance
from leaky.record.replay import ForwardReplay
from leaky.record.run_record import RunRecord, snapshot
from leaky.record.sites import DetailContext, SiteTable, SourceLocator, call_detail, scores_site
from leaky.record.step_record import StepBuffer
from leaky.record.steps import StepTracking
from leaky.record.warning_source import WarningSource

# NOTE: an op that can only pass values on (ops.keeps_finite: it copies, selects, bounds or
# normalises them and never makes one larger than the largest input) has its output checked
# for NaN/Inf only if some input was not already checked (data, a parameter, a masked
# fill): a non-finite value it passes on was reported where it appeared. A normaliser
# (x - mean) * rstd * weight + bias is finite when x was checked and the per-group mean and
# rstd its node saves (one value per channel or row) and the affine parameters are: those
# few values are checked instead of the whole output (up to values past ~1e36, where the
# product overflows). Only the node types ops.layers registers; others are checked in full.


# NOTE: a watch counts those rates on every sampled step of the audit's default window (the
# first AuditConfig.steps = 20 steps), where their cost is paid once: over those steps
# `watch --every 1` judges the same counts as `audit`, so a share near a threshold reads the
# same (and gets the same severity) in both. After them, once every RATE_GAP steps.
DENSE_RATE_STEPS = AuditConfig.steps

_UNSET = object()


class StopObserving(BaseException):
    """Raised to end a script after its last observed step (BaseException: user
    `except Exception` blocks do not swallow it)."""


class Recorder(StepTracking, ScheduleHost):
    """Records a run. `sample_every=None` is an audit: every step in detail, or, with
    config.steady_every set, its first steps and then one in steady_every (AuditConfig); an
    integer N (a watch) observes every N-th step in detail and only the cheap monitor otherwise."""

    def __init__(self, config: AuditConfig, make_sink: Callable, on_limit: Callable[[], None] | None = None,
                 on_step: Callable[["Recorder"], None] | None = None, sample_every: int | None = None,
                 on_series: Callable[[list], None] | None = None, schedule=None) -> None:
        """`schedule`: a watch's record/budget.py Schedule (which steps are sampled, what they
        cost); None in an audit, which observes every step. `make_sink(config)`: what each sampled step's record goes to (add_step, add_series;
        with several ranks, merge_ranks of what process/distributed.py's exchange returned,
        asking first_nonfinite and events_wanted first; its `steps` counts the sampled steps
        it received)."""
        self.config = config
        self._mark = ("leaky", id(self))   # node.metadata key: node -> its site
        self.on_limit = on_limit
        self.on_step = on_step
        self.on_series = on_series
        self._sample_every = sample_every
        self.dense_steps = 0        # with sampling: the first steps are all observed in detail
        # NOTE: an audit (no sampling asked for) with config.steady_every set measures its first
        # config.full_steps steps in full, then one steady step in steady_every; the others are
        # light, as a watch's unsampled step. Its step limit then counts the steps run, light
        # ones too (otherwise, and a watch's, the steps observed in detail).
        self.audits = sample_every is None
        if self.audits and config.steady_every is not None:
            self._sample_every, self.dense_steps = config.steady_every, config.full_steps
        if schedule is None and self._sample_every is not None:
            schedule = Schedule(self._sample_every)   # a watch's --every, an audit's steady_every
        self.schedule = schedule
        self.monitor = StepMonitor()
        if schedule is not None:
            self.monitor.clock = schedule.clock
        self.updates = UpdateMeter()
        self.coupling = CouplingMeter()   # whose loss reaches whose parameters (adversarial games)
        self.moving = MovingWeights()     # untrained weights that change: a synced target network
        self._backward_patch = TensorBackwardPatch(self._on_tensor_backward)
        self._teardown = TeardownPatch(self._flush_at_teardown)
        self.active = False        # between __enter__ and __exit__, with no internal error
        self.last_optimizer: torch.optim.Optimizer | None = None
        self.warning_source = WarningSource()   # torch's warnings point at the user's line, not leaky's
        self.modules = ModuleTracker()
        self.replay = ForwardReplay()   # a forward NaN of an unsampled step, named by a replay
        self.sites = SiteTable()
        self.locator = SourceLocator()
        self.origins = OriginRecords(self.locator, outside_graphs(self.guarded), self._note_zero_grad, self._mode_paused)
        self.buffer = StepBuffer()
        self.grads = GradientRecorder(self.buffer, self.fail, self._count_rates)
        self.error: str | None = None       # leaky's own failure, if one happened
        self.unauditable: str | None = None  # why the run has nothing to measure, if so
        self.params = ParamTable(self.modules)
        self.builder = make_sink(config)
        self.clean_sites: set[int] = set()   # sites whose output was checked on a clean step (see _check_finite)
        self._bad_seen = False               # a NaN/Inf appeared in a forward output or the loss
        self.units: dict[int, UnitStats] = {}
        self.provenance = Provenance(self.locator.locate)
        self._details = DetailContext(lambda node: node.metadata.get(self._mark), self.provenance.mask_origin_of)
        self.taps = ForwardTaps(("leaky", id(self)), self.provenance.origin_of)
        self.functions = CustomFunctions(self)
        self.batch = BatchMixing(self.left_out, self.modules.key_of, self.locator.locate)
        if config.batch_probe or sample_every is not None:   # LK306's probe; a watch's replay
            self.modules.on_root_return = outside_graphs(self._root_returned)
        if self.schedule is not None:   # a watch: its replay's roots (record/replay.py), its budget's clock
            self.modules.on_root_call = outside_graphs(self._root_called)
            self.origins.timed = self.replay.timed = self.schedule.timed
        self.compiled = CompiledCalls(self)
        self.cut_records = CutRecords(self)   # cuts of the gradient path, in-place initialisations
        self.leaves = MadeLeaves(lambda t: self.params.opt_params.get(id(t)) is t, self.cut_records.leaf_reached)
        self.feedback = FeedbackUses(self._mark)   # square weights a recurrence reuses
        self.bypass = BypassFinder(self._mark)       # sigmoid/tanh whose own input goes around them
        self.optimizers: list[torch.optim.Optimizer] = []
        self.observing = False
        self.step = 0              # index of the step being recorded
        self.backward_calls = 0
        self.saw_optimizer = False
        self._checked = ("leaky-finite", id(self))   # node.metadata: its output was checked
        self._rates_counted_at: int | None = None      # the last step that counted unit rates
        self._mode = OpMode(self)
        self._step_hooks = (outside_graphs(self._before_opt_step), outside_graphs(self._after_opt_step))
        self._handles: list = []
        self._mode_on = False
        self._calls_since_step = 0
        self._optimizer_exists: bool | None = None
        self._old_grads: dict[int, list] = {}   # id(optimizer) -> gradient left at each backward start
        self._stepped: set[int] = set()          # optimizers that have stepped at least once
        self._scaler = None                      # a live GradScaler (False: looked, none)
        self._zeroed_since_backward: list[tuple] = []   # zero_grad() calls since the last backward
        self.backward_at: tuple | None = None    # where the first backward() was called
        self.heap = FrozenHeap()                 # the objects alive on entry, frozen for the collector
        self._exits = ExitStack()                # what __exit__ leaves: every instrument entered
        self.added = instruments.made(self)      # the instruments registered in record/instruments/
        self.step_enders = [part.end_step for part in self.added.values() if hasattr(part, "end_step")]

    @property
    def sample_every(self) -> int | None:
        """Every how many steps one is observed in detail; None: every step.

        NOTE: an audit of a torch.compile'd model measures every step in full: Dynamo guards
        on the torch-function mode, so a light step (the mode off) and a full one would each
        run their own compiled graph, and leaky's view of the compiled code would change
        between them."""
        if self.audits and self.compiled.names:
            return None
        return self._sample_every

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "Recorder":
        """Enter every instrument, the added ones (record/instruments/) after the recorder's
        own; should one fail to enter, those already entered are left again."""
        with ExitStack() as stack:
            for part in (self.warning_source, self.modules, self.replay, self.origins):
                stack.enter_context(part)
            self._hook_steps()
            stack.callback(self._unhook_steps)
            stack.callback(self.grads.remove_all)
            for part in (self.functions, self.compiled, self._backward_patch, self._teardown):
                stack.enter_context(part)
            self._mode.__enter__()
            self._mode_on = True
            stack.callback(self._mode_off)
            for part in self.added.values():
                stack.enter_context(part)
            self.observing = True
            self.active = True
            stack.enter_context(self.heap)   # last: a failure above leaves the collector alone
            self._exits = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        self.observing = False
        self.active = False
        self.grads.active = False
        self._exits.close()   # each instrument left in the reverse order of entry, whatever one of them raises
        if self.buffer.records and self.error is None:
            self.guarded(self._flush)
        self.guarded(settle_units, self.units.values())   # a last forward with no backward after it
        if self.error is None and (self.monitor.pending or self.monitor.loss is not None):
            if self.monitor.loss is not None and self._calls_since_step:
                self.monitor.end_step(self.step, self.last_optimizer, None, self.optimizer_index(self.last_optimizer))
            self.guarded(self.flush_series)

    # -- leaky's own failures ----------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """Stop observing, keep what was recorded, never break the user's training.

        With config.strict (the test suite sets LEAKY_STRICT=1) the error is raised instead.
        """
        if self.config.strict:
            raise exc
        if self.error is None:
            self.error = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"leaky stopped observing after an internal error ({self.error}); "
                          "training continues unobserved. Please report this.", RuntimeWarning, stacklevel=2)
        self._stop_observing()

    def _stop_observing(self) -> None:
        """Training goes on unobserved; what was recorded so far is kept."""
        self.observing = False
        self.active = False
        self.grads.active = False

    def guarded(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:
            self.fail(exc)

    def _flush_at_teardown(self) -> None:
        """The script tears its process group down: reduce the series' pending steps now."""
        if self.error is None:
            self.guarded(self.flush_series)

    def across_ranks(self, provide, receive) -> None:
        """An instrument's values summed over the ranks at each flush of the series (InstrumentHost)."""
        self.monitor.riders.append((provide, receive))

    def _hook_steps(self) -> None:
        self._handles.append(optim_globals.register_optimizer_step_pre_hook(self._step_hooks[0]))
        self._handles.append(optim_globals.register_optimizer_step_post_hook(self._step_hooks[1]))

    def _unhook_steps(self) -> None:
        for handle in self._handles:   # the step hooks are its only handles
            handle.remove()
        self._handles.clear()

    def _mode_off(self) -> None:
        if self._mode_on:
            self._mode.__exit__(None, None, None)
            self._mode_on = False

    @contextmanager
    def step_hooks_off(self):
        """A compiled optimizer step: leaky's step hooks are called around it (see
        record/compiled.py), so the step itself runs without them, as it would without leaky."""
        self._unhook_steps()
        try:
            yield
        finally:
            self._hook_steps()

    @contextmanager
    def left_out(self):
        """Run a block with none of leaky's instruments that Dynamo could trace: the mode,
        the global module hooks and the Function.apply patch (see record/compiled.py)."""
        mode_was_on = self._mode_on
        hooks_were_on = self.modules.attached
        self._suspend_mode()
        self.modules.detach()
        self.functions.__exit__()
        try:
            yield
        finally:
            self.functions.__enter__()
            if hooks_were_on:
                self.modules.attach()
            if mode_was_on and not self._mode_on:
                self._resume_mode()

    def _root_called(self, module, args) -> None:
        """A root's forward begins on a sampled step (a watch): the replay notes whether it
        draws random numbers (record/replay.py); a training forward (grad on, the module in
        training mode) starts the first step's clock (record/budget.py). An evaluation before
        the first step (nanoGPT's at iteration 0, under no_grad) does not."""
        if self.observing and self.error is None:
            self.guarded(self.replay.root_called, module, args)
        if module.training and torch.is_grad_enabled():
            self.schedule.started()

    def _root_returned(self, module, args, kwargs, output) -> None:
        """A root's forward returned on an observed step: whether it drew random numbers (a
        watch's replay), then LK306's batch probe (an audit and a watch alike: a model's
        first sampled call)."""
        if self.sample_every is not None and self.observing and self.error is None:
            self.guarded(self.replay.root_returned, module)
        if self.config.batch_probe:
            self._probe_batch(module, args, kwargs, output)

    def _probe_batch(self, module, args, kwargs, output) -> None:
        if self.observing and self.error is None and not self.compiled.running:
            self.guarded(self.batch.after_call, module, args, kwargs, output)

    @property
    def steps_done(self) -> int:
        return self.builder.steps

    def snapshot(self) -> RunRecord:
        """What derive reads of this run, frozen (record/run_record.py); observing goes on."""
        return snapshot(self)

    def _note_zero_grad(self, key: tuple) -> None:
        if self.active:
            self.monitor.note_zero_grad()
        if self.active and len(self._zeroed_since_backward) < 64:
            self._zeroed_since_backward.append(key)

    # -- forward ---------------------------------------------------------------------
    def on_op(self, op: str, args: tuple, kwargs: dict, outputs: list[Tensor]) -> None:
        main = outputs[0].grad_fn
        if main is None or self._mark in main.metadata:
            return
        if outputs[0].is_meta:   # nothing to measure: stop here, before a meta tensor is read
            self.unauditable = "the model runs on the meta device: its tensors have shapes but no values"
            self._stop_observing()
            return
        module = self.modules.current
        if module is not None and self.modules.infos[module].called_by_torch is None:
            self.modules.note_caller(module)
        where = self.locator.locate()
        detail = _UNSET   # what a new site keeps of the call (call_detail): asked only for a new site
        first_site = None
        # NOTE: each node's input slots are classified once (slot_kinds): the hook needs
        # them, and only activation slots (kind 1) are walked on, so no node is asked twice
        # whether it leads to a parameter.
        if len(outputs) == 1:
            stack = [] if leads_to_param(main) else [main]
        else:
            stack = [node for node in (t.grad_fn for t in outputs) if node is not None and not leads_to_param(node)]
        while stack:
            node = stack.pop()
            meta = node.metadata
            name = type(node).__name__
            if self._mark in meta or name == ops.COMPILED:
                continue   # seen, or a compiled module's whole backward: its ops are not observed
            site = self.sites.find(op, name, module, where)
            if site is None:
                if detail is _UNSET:
                    detail = call_detail(op, args, kwargs, self._details)
                site = self.sites.intern(op, name, module, where, node._sequence_nr(), detail)
            meta[self._mark] = site
            if first_site is None:
                first_site = site
            nexts = node.next_functions   # a new tuple at each read: read once
            slots = slot_kinds(nexts)
            self.grads.watch(node, site, slots)
            kinds = slots[0]
            if 1 in kinds:
                stack += [fn for (fn, _), kind in zip(nexts, kinds) if kind == 1]
        if first_site is None:
            return   # an op on a parameter only (w.t(), an autocast copy): no activation here
        self.sites.last = first_site
        out = outputs[0]
        traits = ops.traits(op)
        floating = out.is_floating_point()
        if floating and not traits.selects:
            self._check_finite(op, first_site, args, kwargs, outputs, traits)
        self.taps.observe(op, first_site, args, kwargs, self._count_rates(), out, traits)
        if traits.loss is not None and self.batch.waiting and args:
            self.batch.note_loss(args[0])
        if traits.activation is not None and floating:
            self._update_units(first_site, traits.activation, out, op, args, kwargs)
        if traits.matmul:
            self.feedback.note_matmul(args, first_site, self.step)
        if len(outputs) == 1 and ops.elementwise(main):
            self.bypass.note(first_site, main, self.buffer.bypasses)

    def _check_finite(self, op: str, site: int, args: tuple, kwargs: dict, outputs: list[Tensor],
                      traits: ops.Traits | None = None) -> None:
        """One reduction of the op's output whose value is non-finite iff an element is.

        NOTE: until the site's first clean step has given its RMS, the norm, in float64 (a
        float32 sum of squares overflows from |x| ~ 1e19 / sqrt(numel): huge, finite
        activations would read as non-finite); after it, the sum (half the time of a norm;
        in float32 it overflows only when the values sum past 3e38).
        """
        if traits is None:
            traits = ops.traits(op)
        if traits.keeps_finite and self._inputs_checked((*args, *kwargs.values())):
            self._note_checked(outputs)
            return
        out = outputs[0].detach()
        rule = traits.rule
        sides = self._normaliser_sides(rule, args, kwargs, outputs[0]) if rule is not None and rule.normaliser else None
        if site in self.clean_sites and sides is not None:
            value = torch.cat([t.detach().reshape(-1).float() for t in sides]).sum()
        elif site in self.clean_sites:
            low = out.dtype in (torch.float16, torch.bfloat16)
            value = out.sum(dtype=torch.float32 if low else None)
        else:
            wide = torch.float64 if out.device.type in ("cpu", "cuda") else torch.float32   # MPS: no float64
            value = torch.linalg.vector_norm(out, dtype=wide)
        self.buffer.forward_flags.append((site, value, out.numel()))
        self._note_checked(outputs)

    def _normaliser_sides(self, rule, args: tuple, kwargs: dict, out: Tensor) -> list[Tensor] | None:
        """The mean, rstd, weight and bias that, with a checked input, decide whether a
        normaliser's output is finite (None: check the output itself)."""
        node = out.grad_fn
        if not args or ops.node_rule(type(node).__name__) is not rule or not self._inputs_checked(args[:1]):
            return None
        stats = [getattr(node, "_saved_result1", None), getattr(node, "_saved_result2", None)]
        if not all(isinstance(t, Tensor) and t.numel() and t.is_floating_point() for t in stats):
            return None   # e.g. batch norm in eval mode: running statistics, not saved ones
        weight_at, bias_at = rule.normaliser
        affine = [args[i] if len(args) > i else kwargs.get(name) for i, name in ((weight_at, "weight"), (bias_at, "bias"))]
        return stats + [t for t in affine if isinstance(t, Tensor)]

    def _note_checked(self, outputs: list[Tensor]) -> None:
        for t in outputs:
            if t.grad_fn is not None:
                t.grad_fn.metadata[self._checked] = True

    def _inputs_checked(self, args: tuple) -> bool:
        """Whether every floating tensor argument came out of an op checked (or covered) in
        this forward: then a NaN or Inf in it was already reported where it appeared."""
        seen = False
        for arg in args:
            items = arg if isinstance(arg, (list, tuple)) else (arg,)
            for item in items:
                if isinstance(item, Tensor) and item.is_floating_point():
                    node = item.grad_fn
                    if node is None or not node.metadata.get(self._checked):
                        return False
                    seen = True
        return seen

    def _update_units(self, site: int, activation, out: Tensor, op: str, args: tuple, kwargs: dict) -> None:
        if activation.judged is not None:   # gumbel_softmax(hard=True): its soft sample
            out = activation.judged(out, args, kwargs)
            if out is None:
                return
        stats = self.units.get(site)
        if stats is None:
            detail = call_detail(op, args, kwargs, self._details)
            producer = args[0].grad_fn if args and isinstance(args[0], Tensor) else None
            dim = unit_dim(out, type(producer).__name__ if producer is not None else None)
            extra = dict(detail or {})
            extra["flat_share"] = self.config.flat_derivative_share
            extra["peaked_row"] = self.config.peaked_row_probability
            if activation.rows and args and isinstance(args[0], Tensor):
                extra["scores_site"] = scores_site(args[0].grad_fn, self._details)
            stats = self.units[site] = UnitStats(activation, out.shape[dim] if out.ndim else 1, dim, extra)
        if out.ndim and out.shape[stats.unit_dim] != stats.units:
            return  # a differently shaped call at the same line: keep the first shape
        stats.update(out, self.step, self._count_rates())

    def _count_rates(self) -> bool:
        """Whether this step counts fire rates, flat samples, input averages and the share
        of gradient elements each op zeroes (see RATE_GAP): always in an audit, and in a
        watch's first audited steps and on each of its sampled steps before DENSE_RATE_STEPS,
        then at most once every RATE_GAP steps."""
        if self.sample_every is None or self.step < max(self.dense_steps, DENSE_RATE_STEPS):
            return True
        last = self._rates_counted_at
        if last is None or last == self.step or self.step - last >= RATE_GAP:
            self._rates_counted_at = self.step
            return True
        return False

    def note_loss_failure(self, op: str, args: tuple, kwargs: dict, exc: Exception) -> None:
        """A loss call raised (BCE on values outside [0, 1], say): keep what it was given."""
        site = self.sites.intern(op, "<raised>", self.modules.current, self.locator.locate(), -1)
        self.taps.loss_failed(op, site, args, kwargs, exc)

    def site_of(self, node) -> int | None:
        """The site an autograd node was recorded at (None: not one of this run's)."""
        return node.metadata.get(self._mark)
