"""Recorder: owns every instrument for one audit and removes them all on exit.

It counts steps (optimizer steps, or backward calls when no optimizer runs), flushes the
device-side values once per step into the host-side `StatsBuilder`, and stops observing
after the configured number of steps.
"""
from __future__ import annotations

import gc
import warnings
from collections import defaultdict
from typing import Any, Callable

import torch
from torch import Tensor, nn
from torch.optim import optimizer as optim_globals

from leaky.config import AuditConfig
from leaky.record.activations import ACTIVATIONS, UnitStats, hardtanh_bounds, unit_dim
from leaky.record import distributed
from leaky.record.forward import ForwardProbes
from leaky.record.functions import FunctionWatch
from leaky.record.gradients import GradientRecorder, StepBuffer, leads_to_param
from leaky.record.modules import ModuleTracker
from leaky.record.monitor import StepMonitor, TensorBackwardPatch, UpdateProbe
from leaky.record.opmode import OpMode, parameters_in
from leaky.record.sites import SiteTable, SourceLocator
from leaky.fold import StatsBuilder
from leaky.stats import AuditStats, CutEvent

_MATMULS = {"linear", "matmul", "mm", "addmm", "bmm", "baddbmm", "einsum"}
# Ops that only select values: an -inf attention mask is intended, not an overflow.
_SELECTS = {"where", "masked_fill", "masked_fill_"}
_DEAD_ZONE_DETAIL = {"clamp", "clip", "clamp_", "clip_", "clamp_min", "clamp_max", "hardtanh", "relu6"}


_MAX_CALLS_PER_STEP = 1000   # backward calls folded into one step at most


class StopObserving(BaseException):
    """Raised to end a script after its last observed step (BaseException: user
    `except Exception` blocks do not swallow it)."""


class Recorder:
    """Records a run. `sample_every=None` observes every step in detail (an audit); an
    integer N observes every N-th step in detail and only the cheap monitor otherwise."""

    def __init__(self, config: AuditConfig, on_limit: Callable[[], None] | None = None,
                 on_step: Callable[["Recorder"], None] | None = None, sample_every: int | None = None,
                 on_series: Callable[[list], None] | None = None) -> None:
        self.config = config
        self.on_limit = on_limit
        self.on_step = on_step
        self.on_series = on_series
        self.sample_every = sample_every
        self.dense_steps = 0        # with sampling: the first steps are all observed in detail
        self.monitor = StepMonitor()
        self.updates = UpdateProbe()
        self._backward_patch = TensorBackwardPatch(self._on_tensor_backward)
        self.active = False        # between __enter__ and __exit__, with no internal error
        self.last_optimizer: torch.optim.Optimizer | None = None
        self.modules = ModuleTracker()
        self.sites = SiteTable()
        self.locator = SourceLocator()
        self.buffer = StepBuffer()
        self.grads = GradientRecorder(self.buffer, self.fail)
        self.error: str | None = None       # leaky's own failure, if one happened
        self.unauditable: str | None = None  # why the run has nothing to measure, if so
        self.builder = StatsBuilder(self.sites, self.modules, config)
        self.units: dict[int, UnitStats] = {}
        self.probes = ForwardProbes(("leaky", id(self)))
        self.functions = FunctionWatch(self)
        self.cuts: dict[tuple, CutEvent] = {}
        self.param_uses: dict[int, set[int]] = defaultdict(set)   # id(param) -> matmul sites
        self.optimizers: list[torch.optim.Optimizer] = []
        self.observing = False
        self.step = 0              # index of the step being recorded
        self.backward_calls = 0
        self.saw_optimizer = False
        self._mark = ("leaky", id(self))
        self._mode = OpMode(self)
        self._handles: list = []
        self._mode_on = False
        self._calls_since_step = 0
        self._optimizer_exists: bool | None = None
        self._old_grads: dict[int, list] = {}   # id(optimizer) -> gradient left at each backward start
        self._stepped: set[int] = set()          # optimizers that have stepped at least once
        self._scaler = None                      # a live GradScaler (False: looked, none)

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "Recorder":
        self.modules.__enter__()
        self._handles.append(optim_globals.register_optimizer_step_pre_hook(self._before_opt_step))
        self._handles.append(optim_globals.register_optimizer_step_post_hook(self._after_opt_step))
        self.functions.__enter__()
        self._backward_patch.__enter__()
        self._mode.__enter__()
        self._mode_on = True
        self.observing = True
        self.active = True
        return self

    def __exit__(self, *exc) -> None:
        self.observing = False
        self.active = False
        self.grads.active = False
        try:
            self._backward_patch.__exit__()
            if self._mode_on:
                self._mode.__exit__(None, None, None)
                self._mode_on = False
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles.clear()
            self.grads.remove_all()
            self.modules.__exit__()
            self.functions.__exit__()
        if self.buffer.records and self.error is None:
            self.guarded(self._flush)
        if self.error is None and (self.monitor.pending or self.monitor.loss is not None):
            if self.monitor.loss is not None and self._calls_since_step:
                self.monitor.end_step(self.step, self.last_optimizer)
            self.guarded(self._flush_series)

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
        self.observing = False
        self.active = False
        self.grads.active = False

    def guarded(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:
            self.fail(exc)

    @property
    def steps_done(self) -> int:
        return self.builder.steps

    def finish(self) -> AuditStats:
        return self.builder.build(self.units, self.cuts, self.param_uses, self.optimizers,
                                  self.backward_calls, self.probes, self.functions.checks)

    # -- forward ---------------------------------------------------------------------
    def on_op(self, op: str, args: tuple, kwargs: dict, outputs: list[Tensor]) -> None:
        main = outputs[0].grad_fn
        if main is None or self._mark in main.metadata:
            return
        if outputs[0].is_meta:
            self.unauditable = "the model runs on the meta device: its tensors have shapes but no values"
            return
        module = self.modules.current
        where = self.locator.locate()
        detail = self._detail(op, args, kwargs)
        first_site = None
        stack = [t.grad_fn for t in outputs]
        while stack:
            node = stack.pop()
            if node is None or leads_to_param(node):
                continue
            meta = node.metadata
            if self._mark in meta:
                continue
            site = self.sites.intern(op, type(node).__name__, module, where, node._sequence_nr(), detail)
            meta[self._mark] = site
            if first_site is None:
                first_site = site
            self.grads.watch(node, site)
            stack.extend(fn for fn, _ in node.next_functions)
        if first_site is None:
            return   # an op on a parameter only (w.t(), an autocast copy): no activation here
        out = outputs[0]
        if out.is_floating_point() and op not in _SELECTS:
            # NOTE: one reduction per op; the norm is non-finite iff some element is (or the
            # sum of squares overflows float32, which only values near overflow reach).
            low = out.dtype in (torch.float16, torch.bfloat16)   # their norm would overflow
            norm = torch.linalg.vector_norm(out.detach(), dtype=torch.float32 if low else None)
            self.buffer.forward_flags.append((first_site, norm, out.numel()))
        self.probes.observe(op, first_site, args, kwargs)
        activation = ACTIVATIONS.get(op)
        if activation is not None and out.is_floating_point():
            self._update_units(first_site, activation, out, detail, args)
        if op in _MATMULS:
            for param in parameters_in(args):
                if param.ndim == 2 and param.shape[0] == param.shape[1]:
                    self.param_uses[id(param)].add(first_site)

    def _detail(self, op: str, args: tuple, kwargs: dict) -> dict[str, Any] | None:
        if op in ("softmax", "log_softmax") and args and isinstance(args[0], Tensor):
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            x = args[0]
            if dim is None:
                dim = 0 if x.ndim in (0, 1, 3) else 1   # torch's legacy implicit dim
            return {"dim": int(dim), "dim_size": int(x.shape[dim]) if x.ndim else 1}
        if op == "log" and args and isinstance(args[0], Tensor) and args[0].grad_fn is not None:
            return {"input_node": type(args[0].grad_fn).__name__}
        if op in ("hardtanh", "hardtanh_", "relu6"):
            low, high = hardtanh_bounds(op, args, kwargs)
            return {"low": low, "high": high}
        if op in _DEAD_ZONE_DETAIL:
            low = kwargs.get("min", args[1] if len(args) > 1 else None)
            high = kwargs.get("max", args[2] if len(args) > 2 else None)
            if op == "clamp_max":
                low, high = None, low
            return {"low": _plain(low), "high": _plain(high)}
        return None

    def _update_units(self, site: int, activation, out: Tensor, detail, args) -> None:
        stats = self.units.get(site)
        if stats is None:
            producer = args[0].grad_fn if args and isinstance(args[0], Tensor) else None
            dim = unit_dim(out, type(producer).__name__ if producer is not None else None)
            extra = dict(detail or {})
            extra["flat_share"] = self.config.flat_derivative_share
            stats = self.units[site] = UnitStats(activation, out.shape[dim] if out.ndim else 1, dim, extra)
        if out.ndim and out.shape[stats.unit_dim] != stats.units:
            return  # a differently shaped call at the same line: keep the first shape
        stats.update(out, self.step)

    def note_loss_failure(self, op: str, args: tuple, kwargs: dict, exc: Exception) -> None:
        """A loss call raised (BCE on values outside [0, 1], say): keep what it was given."""
        site = self.sites.intern(op, "<raised>", self.modules.current, self.locator.locate(), -1)
        self.probes.loss_failed(op, site, args, kwargs, exc)

    # -- cut paths -------------------------------------------------------------------
    def note_cut(self, kind: str, args: tuple) -> None:
        if not args or not isinstance(args[0], Tensor) or not args[0].requires_grad:
            return
        if not torch.is_grad_enabled() and kind == "detach":
            return
        tensor = args[0]
        producer = self._producer_module(tensor)
        self._add_cut(kind, producer)

    def note_no_grad(self, args: tuple) -> None:
        if any(p.requires_grad for p in parameters_in(args)):
            module = self.modules.current
            self._add_cut("no_grad", module)

    def _producer_module(self, tensor: Tensor) -> int | None:
        node = tensor.grad_fn
        if node is not None:
            site = node.metadata.get(self._mark)
            return None if site is None else self.sites.sites[site].module_key
        if isinstance(tensor, nn.Parameter):
            return self.builder.module_of_param(tensor)
        return None

    def _add_cut(self, kind: str, producer: int | None) -> None:
        where = self.locator.locate()
        key = (kind, producer, where, self.modules.current)
        event = self.cuts.get(key)
        if event is None:
            self.cuts[key] = CutEvent(kind, producer, self.modules.current, where, self.step)

    # -- backward and steps ----------------------------------------------------------
    def _on_tensor_backward(self, original, tensor, args, kwargs):
        if not self.active:
            return original(tensor, *args, **kwargs)
        if self._backward_ends_step():
            self.guarded(self._end_step)
        self.guarded(self._note_backward, tensor)
        return original(tensor, *args, **kwargs)

    def _note_backward(self, tensor) -> None:
        if isinstance(tensor, Tensor) and tensor.numel() == 1 and tensor.is_floating_point():
            loss = self._unscaled(tensor)
            self.monitor.note_loss(loss)
            if self.observing:
                with torch._C.DisableTorchFunction(), torch.no_grad():
                    self.buffer.extras.setdefault("loss", loss.detach().reshape(()).clone())
            self._probe_old_grads()
        self.backward_calls += 1
        self._calls_since_step += 1

    def _unscaled(self, loss: Tensor) -> Tensor:
        """The loss itself when backward() is called on scaler.scale(loss) = loss * S."""
        if type(loss.grad_fn).__name__ != "MulBackward0":
            return loss
        if self._scaler is None:
            self._scaler = _live_grad_scaler() or False
        scale = getattr(self._scaler, "_scale", None) if self._scaler else None
        if scale is None or not self._scaler.is_enabled():
            return loss
        with torch._C.DisableTorchFunction(), torch.no_grad():
            return loss.detach() / scale.to(loss.device).reshape(())

    def _probe_old_grads(self) -> None:
        """At each backward start, how much gradient each optimizer's parameters still hold.

        NOTE: an optimizer's gradients were zeroed between two of its steps if any backward
        in between started with them at zero (or None). Judged per optimizer, a GAN whose
        generator backward starts while the discriminator's gradients are still there is
        not mistaken for one that never zeroes.
        """
        for optimizer in self.optimizers:
            grads = [p.grad for group in optimizer.param_groups for p in group["params"]
                     if p.grad is not None and not p.grad.is_sparse]
            if not grads:
                self._old_grads.setdefault(id(optimizer), []).append(0.0)
                continue
            with torch._C.DisableTorchFunction(), torch.no_grad():
                norms = torch._foreach_norm(grads)
                self._old_grads.setdefault(id(optimizer), []).append(torch.stack([n.float() for n in norms]).max())

    def _note_old_grads(self, optimizer) -> None:
        """Before an optimizer's step: the least gradient any backward since its last step
        started from (0 when it was zeroed)."""
        seen = self._old_grads.pop(id(optimizer), None)
        if not seen or id(optimizer) not in self._stepped:
            return
        if any(isinstance(v, float) for v in seen):
            self.buffer.extras["carried"] = torch.zeros(())
        else:
            with torch._C.DisableTorchFunction():
                self.buffer.extras["carried"] = torch.stack(seen).min()

    def _backward_ends_step(self) -> bool:
        """Without an optimizer step seen, does a new backward call start a new step?

        NOTE: gradient accumulation calls backward k times per optimizer step, and before
        the first step we cannot tell it from a loop with no optimizer. So, once, look
        for a live optimizer: if one exists its steps delimit the steps (with a cap that
        keeps memory bounded if it is never stepped); if none does, each backward is a step.
        """
        if self.saw_optimizer or not self._calls_since_step:
            return False
        if self._optimizer_exists is None:
            graded = {id(p) for p in self.builder.tracked_params() if p.grad is not None}
            self._optimizer_exists = bool(graded) and _live_optimizer_over(graded)
        return not self._optimizer_exists or self._calls_since_step >= _MAX_CALLS_PER_STEP

    def _before_opt_step(self, optimizer, args, kwargs):
        if not self.active:
            return None
        if optimizer not in self.optimizers:
            self.optimizers.append(optimizer)
            self.builder.note_optimizer(optimizer)
        self.saw_optimizer = True
        self.last_optimizer = optimizer
        self._in_step = True
        sampled = self.observing
        if sampled:
            self.guarded(self.updates.before_step, optimizer)
            self.guarded(self._note_old_grads, optimizer)
        self._stepped.add(id(optimizer))
        self.observing = False   # the optimizer's own ops are not the model's
        self._suspend_mode()
        return self._observe_closure(args, kwargs, sampled)

    def _observe_closure(self, args, kwargs, sampled: bool):
        """optimizer.step(closure) runs forward and backward inside the step (Lightning,
        LBFGS): observe the closure as the step's training code, not as optimizer internals."""
        closure = kwargs.get("closure", args[0] if args else None)
        if not callable(closure):
            return None

        def observed_closure(*a, **k):
            if sampled and self.active and self.error is None:
                self.observing = True
                self._resume_mode()
            try:
                return closure(*a, **k)
            finally:
                self.observing = False
                self._suspend_mode()

        if "closure" in kwargs:
            return args, {**kwargs, "closure": observed_closure}
        return (observed_closure, *args[1:]), kwargs

    def _after_opt_step(self, optimizer, args, kwargs) -> None:
        if getattr(self, "_in_step", False):
            self._in_step = False
            sampled = bool(self.updates.params)
            if sampled:
                self.guarded(self._note_updates)
            self.observing = sampled and self.error is None
            self.guarded(self._end_step)

    def _note_updates(self) -> None:
        params, updates, weights = self.updates.after_step()
        self._update_layout = ([id(p) for p in params], len(self.buffer.values))
        self.buffer.values.extend(updates)
        self.buffer.values.extend(weights)

    def _suspend_mode(self) -> None:
        """Leave the optimizer's many small ops alone: pop our mode if it is on top."""
        stack = torch._C._len_torch_function_stack()
        if self._mode_on and stack and torch._C._get_function_stack_at(stack - 1) is self._mode:
            self._mode.__exit__(None, None, None)
            self._mode_on = False

    def _resume_mode(self) -> None:
        if not self._mode_on:
            self._mode.__enter__()
            self._mode_on = True

    def _sample(self, on: bool) -> None:
        """Observe the next step in detail (mode and node hooks on), or only cheaply."""
        on = on and self.error is None and self.active
        self.observing = on
        self.grads.active = on
        if on:
            self._resume_mode()
        else:
            self._suspend_mode()

    def _end_step(self) -> None:
        if not self.backward_calls and not self.buffer.records:
            return   # an optimizer step with no backward seen: nothing to fold
        sampled = self.observing or bool(self.buffer.records)
        if sampled:
            self._flush()
        self.monitor.end_step(self.step, self.last_optimizer if self.saw_optimizer else None)
        if sampled or self.monitor.due():
            self._flush_series()
        self.step += 1
        self._calls_since_step = 0
        if self.on_step is not None:
            self.on_step(self)
        limit = self.config.steps
        if limit is not None and self.builder.steps >= limit:
            self._sample(False)
            self.active = False
            if self.on_limit is not None:
                self.on_limit()
            return
        every = self.sample_every
        self._sample(every is None or self.step < self.dense_steps or self.step % every == 0)

    def _flush_series(self) -> None:
        rows = self.monitor.flush()
        self.builder.add_series(rows)
        if self.on_series is not None and rows:
            self.on_series(rows)

    def _flush(self) -> None:
        self._calls_since_step = 0
        grads = self.builder.collect_param_grads(self.buffer)
        updates, self._update_layout = getattr(self, "_update_layout", None), None
        host = self.buffer.flush()
        self.builder.add_step(self.step, host, grads, updates)
        self.grads.forget_handles()
        if distributed.running():
            self._reduce_across_ranks()

    def _reduce_across_ranks(self) -> None:
        """Collectives on every rank at the same sampled step (DDP keeps ranks in step)."""
        self.builder.global_units = distributed.reduce_units(self.units)
        if not self.builder.remote_events_done:
            events = distributed.gather_events(self.builder.local_event())
            self.builder.note_rank_events(events)


def _live_grad_scaler():
    """An enabled torch.amp.GradScaler in this process, if any (one gc scan)."""
    kinds = tuple(t for t in (getattr(torch.amp, "GradScaler", None),) if isinstance(t, type))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                if kinds and isinstance(obj, kinds) and obj.is_enabled():
                    return obj
            except Exception:
                continue
    return None


def _live_optimizer_over(param_ids: set[int]) -> bool:
    """Whether a live optimizer holds one of these parameters (one gc scan)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # isinstance on lazy proxies may warn
        for obj in gc.get_objects():
            try:
                if not isinstance(obj, torch.optim.Optimizer):
                    continue
                if any(id(p) in param_ids for group in obj.param_groups for p in group["params"]):
                    return True
            except Exception:
                continue
    return False


def _plain(value):
    if isinstance(value, Tensor):
        return None  # a tensor bound: reading it would sync the device
    return value
