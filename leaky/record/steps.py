"""Step boundaries: backward calls, optimizer steps, sampling, and the per-step flush.

A mixin of `Recorder`. A step ends at each optimizer step (or, with no optimizer, at the
next backward call). At the end of a step the sampled step's device values are flushed
once to the host, the cheap series is batched, and the next step is sampled or not.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch
from torch import Tensor

from leaky import ops
from leaky.process import distributed
from leaky.record.activations import count_held, settle_units
from leaky.record.clipping import note_clipping
from leaky.record.loss_path import loss_path_sites
from leaky.record.replay import nonfinite, read_on_host
from leaky.record.step_record import ParamNorms, UpdateNorms

_MAX_CALLS_PER_STEP = 1000   # backward calls folded into one step at most
_NOTHING = nullcontext()
COUPLING_STEPS = 100         # steps on which whose-loss-reaches-whom is probed, sampled or not


class StepTracking:
    # -- backward and steps ----------------------------------------------------------
    def _on_tensor_backward(self, original, tensor, args, kwargs):
        if not self.active:
            return original(tensor, *args, **kwargs)
        if self._backward_ends_step():
            self.guarded(self._end_step)
        if self.schedule is None:
            self.guarded(self._note_backward, tensor)
        else:
            self.schedule.timed(self.guarded, self._note_backward, tensor)
        out = original(tensor, *args, **kwargs)
        if self.active and not self.saw_optimizer and self._ends_at_backward():
            # NOTE: with no optimizer the step is this backward: it ends here, while .grad
            # holds what it computed. A loop that updates by hand (p.data -= lr * p.grad)
            # and calls model.zero_grad() before its next backward would otherwise be seen
            # with every gradient already cleared: its first step too (a watch's first pass
            # then reported every parameter as receiving no gradient).
            self.guarded(self._end_step)
        return out

    def _ends_at_backward(self) -> bool:
        """Whether the backward that just returned ends the step: no optimizer exists.
        Decided at the first backward: an optimizer built while leaky observes (the common
        case) is taken to exist without a look, as before, and its step() ends the step (a
        second backward with no step between looks it up); with none built, one gc scan."""
        if self._optimizer_exists is None and self.origins.optimizers:
            return False
        return self._no_optimizer()

    def _note_backward(self, tensor) -> None:
        is_tensor = isinstance(tensor, Tensor)
        if is_tensor and tensor.requires_grad and tensor.grad_fn is None and self.observing:
            self.cut_records.note_leaf_loss(tensor)
        loss = self._unscaled(tensor) if is_tensor and tensor.numel() == 1 and tensor.is_floating_point() else None
        host = read_on_host(loss) if loss is not None else None
        if self.replay.calls:   # a watch's unsampled step (record/replay.py)
            self._replay_if_nonfinite(loss, host)
        if loss is not None:
            self.monitor.note_loss(loss, host)
            if (self.observing or self.step < COUPLING_STEPS) and not self._calls_since_step:
                self.coupling.at_first_backward(self.optimizers)
            if self.observing:
                with torch._C.DisableTorchFunction(), torch.no_grad():
                    if self.buffer.loss is None:   # the step's first loss
                        self.buffer.loss = loss.detach().reshape(()).clone()
                # NOTE: only on a sampled step, whose optimizer step reads them (_note_old_grads):
                # a watch's unsampled step skips a pass over every parameter and, where the
                # gradients were zeroed in place, a norm of all of them
                self._probe_old_grads()
        if self.observing:
            count_held(self.units.values())   # while autograd still holds them (the backward frees them)
        if isinstance(tensor, Tensor) and tensor.grad_fn is not None and self.observing:
            path = loss_path_sites(tensor.grad_fn, self._mark)
            for site in path.sites:
                info = self.sites.sites[site]
                info.loss_path = True
                if ops.drops_outputs(info.op):
                    self.grads.mass_sites.add(site)
                units = self.units.get(site)
                if units is not None:
                    units.on_loss_path = True   # an output softmax: its last steps' rows are kept
            self.leaves.on_loss_path(path.leaves)
            note_clipping(self.sites.sites, path.choosers, self._mark)
        if self.backward_at is None:
            self.backward_at = self.locator.locate()
        self._zeroed_since_backward.clear()
        self.backward_calls += 1
        self._calls_since_step += 1

    def _replay_if_nonfinite(self, loss: Tensor | None, host: float | None) -> None:
        """An unsampled step's backward: if its loss is not finite and no sampled step has
        seen a forward NaN yet, run the step's root calls again under the op mode, so that
        the first non-finite op is named at this step (record/replay.py). The kept calls are
        let go either way.

        NOTE: not with several ranks: a replay is one rank's, and its record would be
        folded on that rank alone, out of step with the exchange of sampled steps."""
        try:
            if loss is not None and not self._bad_seen and nonfinite(loss, host) and not distributed.running():
                self._replay_forward()
        finally:
            self.replay.calls.clear()

    def _replay_forward(self) -> None:
        """The replay, with leaky's global module hooks and LK306's probe out of its way:
        the hooks are put on again inside it (after `untouched` has hidden the user's)."""
        was_attached = self.modules.attached
        self.modules.detach()
        callbacks = self.modules.on_root_call, self.modules.on_root_return
        self.modules.on_root_call = self.modules.on_root_return = None
        try:
            self.replay.run(self._observed_replay, self.step)
        finally:
            self.modules.on_root_call, self.modules.on_root_return = callbacks
            if was_attached:
                self.modules.attach()

    @contextmanager
    def _observed_replay(self):
        """One replayed call observed as a sampled step's forward is, and its forward flags
        folded as this step's record (a record with no backward and no parameter norms)."""
        self.modules.attach()
        self.observing = True
        self._resume_mode()
        done = False
        try:
            yield
            done = True
        finally:
            self.observing = False
            self._suspend_mode()
            self.modules.detach()
            self.grads.remove_all()   # the hooks on the replay's nodes and on the parameters
            self.grads.forget_handles()
            host = self.buffer.flush()
        if done:
            self._note_clean_sites(host)
            settle_units(self.units.values())
            self.builder.add_step(self.step, host)

    def _unscaled(self, loss: Tensor) -> Tensor:
        """The loss itself when backward() is called on scaler.scale(loss) = loss * S."""
        if type(loss.grad_fn).__name__ != ops.SCALED_LOSS_NODE:
            return loss
        if self._scaler is None:
            self._scaler = self.heap.grad_scaler() or False
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
        with torch._C.DisableTorchFunction(), torch.no_grad():   # leaky's .grad reads are no op of the model's
            for optimizer in self.optimizers:
                grads = [distributed.local(p.grad) for group in optimizer.param_groups for p in group["params"]
                         if p.grad is not None and not p.grad.is_sparse]
                if not grads:
                    self._old_grads.setdefault(id(optimizer), []).append(0.0)
                    continue
                norms = torch._foreach_norm(grads)
                self._old_grads.setdefault(id(optimizer), []).append(torch.stack([n.float() for n in norms]).max())

    def _note_old_grads(self, optimizer) -> None:
        """Before an optimizer's step: the least gradient any backward since its last step
        started from (0 when it was zeroed)."""
        seen = self._old_grads.pop(id(optimizer), None)
        if not seen or id(optimizer) not in self._stepped:
            return
        index = self.optimizers.index(optimizer)
        if any(isinstance(v, float) for v in seen):
            self.buffer.carried[index] = torch.zeros(())
        else:
            with torch._C.DisableTorchFunction():
                self.buffer.carried[index] = torch.stack(seen).min()

    def _backward_ends_step(self) -> bool:
        """Without an optimizer step seen, does a new backward call start a new step?

        NOTE: gradient accumulation calls backward k times per optimizer step, and before
        the first step we cannot tell it from a loop with no optimizer. So, once, look
        for a live optimizer: if one exists its steps delimit the steps (with a cap that
        keeps memory bounded if it is never stepped); if none does, each backward is a step.
        """
        if self.saw_optimizer or not self._calls_since_step:
            return False
        return self._no_optimizer() or self._calls_since_step >= _MAX_CALLS_PER_STEP

    def _no_optimizer(self) -> bool:
        """No live optimizer holds the parameters seen (looked up once, after a backward)."""
        if self._optimizer_exists is None:
            trained = {id(p) for p in self.params.tracked()}
            self._optimizer_exists = bool(trained) and self.heap.holds_optimizer_over(trained)
        return not self._optimizer_exists

    def _before_opt_step(self, optimizer, args, kwargs):
        if not self.active:
            return None
        if self.schedule is None:
            return self._before_step_of(optimizer, args, kwargs)
        return self.schedule.timed(self._before_step_of, optimizer, args, kwargs)

    def _before_step_of(self, optimizer, args, kwargs):
        self._suspend_mode()   # first: leaky's own reads of .grad and .requires_grad below skip it too
        if optimizer not in self.optimizers:
            self.optimizers.append(optimizer)
            self.params.note_optimizer(optimizer, len(self.optimizers) - 1)
            self.guarded(self.moving.before_first_update, self.modules, self.params.opt_params)
            if not self.observing and self.schedule is not None:
                self.schedule.new_optimizer()   # its first look: a GAN's generator steps after step 0
        self.guarded(self._note_step_origin, optimizer, self.observing)
        if self.schedule is not None:
            self.schedule.optimizer_stepped(self.optimizer_index(optimizer), self.step)
        self.saw_optimizer = True
        self.last_optimizer = optimizer
        self._in_step = True
        sampled = self.observing
        if sampled or self.step < COUPLING_STEPS:
            self.guarded(self.coupling.at_step, self.optimizers, self.optimizer_index(optimizer))
        if sampled:
            self.guarded(self.updates.before_step, optimizer)
            self.guarded(self._note_old_grads, optimizer)
        self._stepped.add(id(optimizer))
        self.observing = False   # the optimizer's own ops are not the model's
        return self._observe_closure(optimizer, args, kwargs, sampled)

    def _note_step_origin(self, optimizer, sampled: bool) -> None:
        """Where this optimizer is stepped, whether a zero_grad() cleared its gradients
        between the step's backward() and now, and its learning rates on sampled steps."""
        origin = self.origins.optimizer(optimizer)
        if origin.step_at is None:
            origin.step_at = self.locator.locate()
        if self._calls_since_step and self._zeroed_since_backward:
            ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
            hit = next((key for key in self._zeroed_since_backward if self.origins.clears(key, optimizer, ids)), None)
            if hit is not None:
                origin.cleared_steps += 1
                origin.cleared_at = origin.cleared_at or self.origins.zero_grads[hit].where
        if sampled:
            origin.note_lrs(optimizer)

    def _observe_closure(self, optimizer, args, kwargs, sampled: bool):
        """optimizer.step(closure) runs forward and backward inside the step (Lightning,
        LBFGS): observe the closure as the step's training code, not as optimizer internals.

        NOTE: the hook's `args` hold the optimizer itself first (step is a method), then the
        closure when it is passed by position."""
        at = 1 if args and args[0] is optimizer else 0
        closure = kwargs.get("closure", args[at] if len(args) > at else None)
        if not callable(closure):
            return None
        origin = self.origins.optimizer(optimizer)
        origin.closure_calls_now = 0

        def observed_closure(*a, **k):
            origin.closure_calls_now += 1
            origin.closure_calls = max(origin.closure_calls, origin.closure_calls_now)
            # NOTE: only the first evaluation is observed in detail: a line search (LBFGS)
            # re-runs the same graph up to max_iter times a step, at points close together.
            if sampled and self.active and self.error is None and origin.closure_calls_now == 1:
                self.observing = True
                self._resume_mode()
            try:
                return closure(*a, **k)
            finally:
                self.observing = False
                self._suspend_mode()

        if "closure" in kwargs:
            return args, {**kwargs, "closure": observed_closure}
        return (*args[:at], observed_closure, *args[at + 1:]), kwargs

    def _after_opt_step(self, optimizer, args, kwargs) -> None:
        if getattr(self, "_in_step", False):
            self._in_step = False
            sampled = bool(self.updates.params)
            if sampled:
                self.guarded(self._note_updates)
            self.observing = sampled and self.error is None
            self.guarded(self._end_step)

    def _note_updates(self) -> None:
        params, updates, weights, low, rounded = self.updates.after_step()
        self.buffer.updates = UpdateNorms([id(p) for p in params], len(self.buffer.values), [id(p) for p in low])
        self.buffer.values.extend(updates)
        self.buffer.values.extend(weights)
        self.buffer.values.extend(rounded)

    def _suspend_mode(self) -> bool:
        """Leave the optimizer's many small ops alone: pop our mode if it is on top (True
        if it was)."""
        if not self._mode_on:
            return False   # a watch's unsampled step asks three times: no C call then
        stack = torch._C._len_torch_function_stack()
        if stack and torch._C._get_function_stack_at(stack - 1) is self._mode:
            self._mode.__exit__(None, None, None)
            self._mode_on = False
            return True
        return False

    def _mode_paused(self):
        """Our mode off for a while (a `zero_grad()`: two attribute calls per parameter), back on
        after it if it was on; with it off (a watch's unsampled step), a shared null context."""
        return self._mode_paused_now() if self._mode_on else _NOTHING

    @contextmanager
    def _mode_paused_now(self):
        popped = self._suspend_mode()
        try:
            yield
        finally:
            if popped:
                self._resume_mode()

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
            self.modules.attach()
        else:
            self._suspend_mode()
            self.grads.pause()
            if self.sample_every is not None and self.active:
                self.modules.pause()   # a watch's unsampled step: nothing reads the running module
        if self.sample_every is not None:   # a watch: its unsampled steps keep their root calls
            self.replay.arm(not on and self.active and self.error is None, self.modules)

    def _end_step(self) -> None:
        if not self.backward_calls and not self.buffer.records:
            return   # an optimizer step with no backward seen: nothing to fold
        # NOTE: an audit with light steady steps has a schedule, but a compiled model's audit
        # measures every step (Recorder.sample_every)
        schedule = self.schedule if self.sample_every is not None else None
        if schedule is None:
            if self._end_step_now():
                self._sample(True)   # an audit observes every step
            return
        start = schedule.clock()
        sampled = self.observing or bool(self.buffer.records)
        step = self.step
        try:
            going_on = self._end_step_now()
        finally:
            spent = schedule.clock() - start
            (schedule.end_work if sampled else schedule.own)(spent)
            schedule.step_ended(step, sampled)   # before the next step is planned
        if going_on:
            # NOTE: several optimizers that step in turn (a GAN's discriminator, then its
            # generator) are sampled as a round of consecutive steps in which each steps: with
            # one step in `every`, an even `every` would only ever see the discriminator.
            round_steps = schedule.round_steps(len(self.optimizers))
            self._sample(schedule.sample(self.step, round_steps) or self.step < self.dense_steps)

    def _end_step_now(self) -> bool:
        """Fold the step that ends; False when the audit's step limit ends observation."""
        self.leaves.settle()
        if self.batch.waiting:
            self.guarded(self.batch.run_pending)   # LK306, once per model: after its first step
        sampled = self.observing or bool(self.buffer.records)
        optimizer = self.last_optimizer if self.saw_optimizer else None
        index = self.optimizer_index(optimizer)
        # NOTE: a watch's series is copied in batches (its check pass flushes it first); an
        # audit's at each step, in the step's one device-to-host copy (`_flush(series=...)`).
        if sampled and self.sample_every is None:
            self._flush(series=(optimizer, index))
        else:
            total = self._flush() if sampled else None
            norm = sampled or self.schedule is None or self.schedule.norm_due(self.step)
            self.monitor.end_step(self.step, optimizer, total, index, norm=norm)
            if self.monitor.norm_seconds and self.schedule is not None:
                self.schedule.own_norm(self.monitor.norm_seconds)
            self.moving.at_step_end(self.step, self.modules, self.params.opt_params)
            if self.monitor.due():
                self.flush_series()
        for end_step in self.step_enders:   # record/instruments/: an added instrument's step ends
            self.guarded(end_step, self.step)
        self.step += 1
        self._calls_since_step = 0
        self.sites.last = None
        if self.on_step is not None:
            self.on_step(self)
        limit = self.config.steps
        if limit is not None and (self.step if self.audits and self.sample_every else self.builder.steps) >= limit:
            self._sample(False)
            self.active = False
            if self.on_limit is not None:
                self.on_limit()
            return False
        return True

    def optimizer_index(self, optimizer) -> int | None:
        """The index of an optimizer among those that stepped (AuditStats.optimizers)."""
        for index, known in enumerate(self.optimizers):
            if known is optimizer:
                return index
        return None

    def flush_series(self) -> None:
        self._add_series(self.monitor.flush())

    def _add_series(self, rows: list) -> None:
        self.moving.flush()   # one copy of what it queued, when it queued any (untrained weights)
        self.builder.add_series(rows)
        if self.on_series is not None and rows:
            self.on_series(rows)

    def _flush(self, series: tuple | None = None) -> Tensor | None:
        """Fold the sampled step; returns the lead optimizer's total gradient norm, made
        from the parameter norms just taken (the monitor need not take them again).
        `series`: (optimizer, its index) of the step that ends here: its loss and norm are
        copied in the same transfer, and its series row folded too (an audit's step)."""
        self._calls_since_step = 0
        self.buffer.params = ParamNorms(*self.params.collect_grads(self.buffer, self.grads.known_norm))
        total = self._total_norm(*self.buffer.params)
        staged = None
        if series is not None:
            self.monitor.end_step(self.step, series[0], total, series[1])
            self.moving.at_step_end(self.step, self.modules, self.params.opt_params)
            staged = self.monitor.staged()
            self.buffer.series = list(staged or ())
        host = self.buffer.flush()
        if staged is not None:
            self._add_series(self.monitor.rows(host.series))
        elif series is not None:
            self.flush_series()   # a sharded norm: its all-reduce first, then its own copy
        self._note_clean_sites(host)
        settle_units(self.units.values())
        self.builder.add_step(self.step, host)
        self.grads.forget_handles()
        if distributed.running():
            self._reduce_across_ranks()
        return total

    def _total_norm(self, ids: list[int], offset: int) -> Tensor | None:
        """sqrt of the summed squared norms of the lead optimizer's gradients, if all were
        collected (plain tensors: sharded ones are combined across ranks by the monitor)."""
        optimizer = self.last_optimizer if self.saw_optimizer else None
        if optimizer is None or distributed.running():
            return None
        position = {pid: offset + i for i, pid in enumerate(ids)}
        wanted = [p for group in optimizer.param_groups for p in group["params"]
                  if p.grad is not None and not p.grad.is_meta]
        if not wanted or any(id(p) not in position for p in wanted):
            return None
        with torch._C.DisableTorchFunction(), torch.no_grad():
            norms = torch.stack([self.buffer.values[position[id(p)]].float() for p in wanted])
            return torch.linalg.vector_norm(norms)

    def _reduce_across_ranks(self) -> None:
        """The exchange across ranks, on every rank at the same sampled step (DDP keeps ranks in step)."""
        sink = self.builder
        wanted = sink.events_wanted
        replicas = self.added.get("replicas")   # record/instruments/replicas.py: DDP's replicas compared
        exchanged = distributed.exchange(self.units, self._described(sink.first_nonfinite()) if wanted else None,
                                         wanted, *([replicas.fingerprints()] if replicas is not None else []))
        sink.merge_ranks(exchanged)
        if replicas is not None:
            replicas.compared(self.step, exchanged.replicas, exchanged.replica_ranks)

    def _described(self, event: tuple | None) -> dict | None:
        """A non-finite event (phase, step, site, value) told without this rank's site numbers."""
        if event is None:
            return None
        phase, step, site, value = event
        record = self.sites.sites[site]
        return {"phase": phase, "step": step, "value": value, "op": record.op, "node": record.node,
                "module": self.modules.name(record.module_key), "file": record.file, "line": record.line}

    def _note_clean_sites(self, host) -> None:
        """Sites whose forward output has been checked on a clean step: from then on a sum,
        not a norm, checks it (see Recorder._check_finite). None after a NaN/Inf appeared in
        a forward output or the loss; a step whose only NaN is in the backward is skipped."""
        if host.forward_bad or host.loss_bad:
            self._bad_seen = True
        if self._bad_seen or host.backward_bad:
            return
        self.clean_sites.update(site for site, numel in zip(host.forward_sites, host.forward_numel) if numel)
