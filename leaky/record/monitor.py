"""The cheap every-step instruments: loss, total gradient norm, learning rate, and the
weight update of sampled steps.

`TensorBackwardPatch` sees every `Tensor.backward()` call without a torch-function mode,
so steps that are not sampled cost no per-op work. `StepMonitor` keeps each step's loss
and gradient norm as device scalars and copies a batch of them to the host at once.
"""
from __future__ import annotations

import functools
import operator
import os
import time
from typing import Callable

import torch
from torch import Tensor

from leaky import ops
from leaky.process import distributed
from leaky.process.guards import outside_graphs
from leaky.process.patch import Patch
from leaky.stats import SeriesRow


class TensorBackwardPatch(Patch):
    """Context manager: route `Tensor.backward` through a callback; restored on exit."""

    def __init__(self, on_backward: Callable) -> None:
        super().__init__(torch.Tensor, "backward", self._routed)
        self.on_backward = on_backward
        self.inside = False

    def _routed(self, original: Callable) -> Callable:
        on_backward, patch = self.on_backward, self

        def backward(tensor, *args, **kwargs):
            # NOTE: under a torch-function mode, the original re-dispatches to
            # `Tensor.backward` (this wrapper) once more: that inner call is not a new one.
            if patch.inside:
                return original(tensor, *args, **kwargs)
            patch.inside = True
            try:
                return on_backward(original, tensor, args, kwargs)
            finally:
                patch.inside = False

        backward.__doc__ = original.__doc__
        backward = outside_graphs(backward, traced=original)
        backward.__wrapped__ = original
        return backward


class TeardownPatch(Patch):
    """Context manager: the script's `torch.distributed.destroy_process_group()` (of the default
    group) runs `flush` first, the last moment the series' pending steps can still be reduced
    across ranks (every rank tears the group down at the same point); restored on exit."""

    def __init__(self, flush: Callable[[], None]) -> None:
        super().__init__(torch.distributed, "destroy_process_group", self._routed)
        self.flush = flush

    def _routed(self, original: Callable) -> Callable:
        flush = self.flush

        @functools.wraps(original)
        def destroy_process_group(*args, **kwargs):
            if (args[0] if args else kwargs.get("group")) is None and distributed.running():
                flush()
            return original(*args, **kwargs)

        return destroy_process_group


FLUSH_GAP = 0.5       # seconds at least between two batched copies of the series (one process)
MOST_PENDING = 4096   # steps pending at most, whatever the time: bounded memory (two 0-d tensors each)


class StepMonitor:
    """Per-step scalars on the device, copied to the host in batches."""

    def __init__(self, batch: int = 64) -> None:
        self.batch = batch
        self.clock = time.perf_counter   # the norm's time, for a watch's budget (record/budget.py)
        self.norm_seconds = 0.0
        self._flushed_at = float("-inf")
        self._offered: tuple[Tensor, int] | None = None   # the script's own norm this step (offer)
        self.offered_used = 0   # steps whose norm was the script's
        self.optimizer_steps = 0   # steps ended by an optimizer's step (none: no gradient norm to take)
        self._counts: dict[tuple, int] = {}   # (id(optimizer), its groups) -> its parameters
        # the steps not yet copied to the host: their rows, loss and grad_norm still 0-d device tensors
        self.pending: list[SeriesRow] = []
        # The current step's loss: the sum of the scalars backward() was called on since the
        # last step, or since the last zero_grad() if one came after them. NOTE: gradients
        # accumulate, so the step applies the gradient of that sum (a GAN discriminator's
        # real + fake losses; k micro-batches of accumulation); a closure that zeroes the
        # gradients before each evaluation (LBFGS) leaves the last evaluation's loss.
        self.loss: Tensor | float | None = None
        self.terms: int | None = None   # ... and how many terms it sums (ops.summed_terms)
        self._zeroed = False
        # With several ranks, whose losses the series holds: (ranks, steps averaged over
        # them, steps that are this rank's alone: flushed with no process group, e.g. after
        # the script's destroy_process_group())
        self.ranks = (1, 0, 0)
        # (provide, receive) of an instrument's values summed over the ranks in the flush's
        # all-reduce (record/instruments/: InstrumentHost.across_ranks)
        self.riders: list[tuple[Callable, Callable]] = []
        self._flat: dict[int, bool] = {}   # id(optimizer) -> it holds FSDP1 flat-parameter shards

    def offer(self, norm: Tensor, max_norm: float, params: int) -> None:
        """The script's clip_grad_norm_ over `params` parameters returned `norm` this step
        (record/instruments/clip_norms.py): the clipped gradients' norm is kept as the step's
        when the monitor does not take its own this step and the step's optimizer holds as
        many parameters; worked out at the flush (_Clipped), no tensor op here."""
        self._offered = (_Clipped(norm, max_norm), params)

    def note_zero_grad(self) -> None:
        self._zeroed = True

    def note_loss(self, loss: Tensor, host: float | None = None) -> None:
        """`host`: the loss's value already read on the host (a CPU loss: record/replay.py's
        `read_on_host`), kept as a float with no tensor op."""
        if self._zeroed:
            self.loss, self._zeroed = None, False
        if loss.numel() == 1 and loss.is_floating_point() and not loss.is_meta:
            terms = ops.summed_terms(loss.grad_fn)
            self.terms = terms if self.loss is None else None if terms is None or self.terms is None \
                else self.terms + terms
            if host is not None:
                self.loss = host if self.loss is None else self.loss + host
                return
            # NOTE: no grad mode needed: a detached tensor's copy and sum join no graph. This
            # runs at every backward of a watch, where each tensor call counts: two for a 0-d
            # loss (docs/performance.md). After the forward each costs 3-5 µs (cold caches):
            # a CPU loss comes as `host` instead, one read in place of three tensor calls.
            with torch._C.DisableTorchFunction():
                value = loss.detach()
                if value.dim():
                    value = value.reshape(())
                if self.loss is None:
                    self.loss = value.clone()
                else:
                    self.loss = self.loss + (value.to(self.loss.device) if isinstance(self.loss, Tensor) else value)

    def end_step(self, step: int, optimizer: torch.optim.Optimizer | None, total: Tensor | None = None,
                 index: int | None = None, norm: bool = True) -> None:
        """Record this step's loss and total gradient norm (no host sync); `total`: that norm,
        when a sampled step has already taken it; `index`: the stepping optimizer's index;
        `norm`: False to leave this step's norm out (a watch over its budget takes it on a
        schedule, record/budget.py). `norm_seconds`: what taking it cost, 0.0 when not taken."""
        self.norm_seconds = 0.0
        want, norm = norm, total
        offered, self._offered = self._offered, None
        if optimizer is not None and norm is None and not want and offered is not None:
            if self._param_count(optimizer) == offered[1]:
                norm = offered[0]   # the script's clip covered as many parameters as this optimizer holds
                self.offered_used += 1
        if optimizer is not None and norm is None and want:
            start = self.clock()
            grads = present_grads(optimizer)
            if grads:
                grad_on = torch.is_grad_enabled()   # create_graph=True: the gradients require grad
                try:
                    torch._C._set_grad_enabled(False)
                    with torch._C.DisableTorchFunction():
                        norm = self._flat_sharded(optimizer) or distributed.total_norm(grads)
                        if norm is None:
                            plain, shards = distributed.sharded_squares(grads)
                            # NOTE: FSDP2 shards are summed over ranks at the batched flush, not per step.
                            norm = plain.sqrt() if shards is None else _Sharded(plain, shards)
                finally:
                    torch._C._set_grad_enabled(grad_on)
            self.norm_seconds = self.clock() - start
        lr = _learning_rate(optimizer)
        self.optimizer_steps += optimizer is not None
        self.pending.append(SeriesRow(step, self.loss, norm, lr, index, self.terms))
        self.loss, self.terms, self._zeroed = None, None, False

    def _param_count(self, optimizer) -> int:
        """How many parameters the optimizer holds (counted once per optimizer and group count)."""
        key = (id(optimizer), len(optimizer.param_groups))
        count = self._counts.get(key)
        if count is None:
            count = self._counts[key] = sum(len(group["params"]) for group in optimizer.param_groups)
        return count

    def _flat_sharded(self, optimizer) -> "_Sharded | None":
        """Under FSDP1, the squared norms of the flat parameters' shards (to be summed over the
        ranks at the flush) and of the other gradients; None for any other optimizer (asked
        once per optimizer)."""
        flat = self._flat.get(id(optimizer))
        if flat is None:
            flat = self._flat[id(optimizer)] = distributed.running() and any(
                distributed.is_flat_shard(p) for group in optimizer.param_groups for p in group["params"])
        if not flat:
            return None
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        shards = [p.grad for p in params if distributed.is_flat_shard(p)]
        rest = [p.grad for p in params if not distributed.is_flat_shard(p)]
        return _Sharded(distributed.squared_norm(rest) if rest else None, distributed.squared_norm(shards)) \
            if shards else None

    def due(self) -> bool:
        """Whether the pending steps are copied now: `batch` of them, and, with one process, at
        least FLUSH_GAP seconds after the last copy (each copy, with the store's write of its
        rows, costs about a millisecond: on a short step, every 64 steps was ~1.5% of the
        training time, docs/performance.md), or MOST_PENDING of them. With several ranks every
        `batch` steps, whatever the clocks say: the copy is an all-reduce that every rank must
        join at the same step."""
        pending = len(self.pending)
        if pending < self.batch:
            return False
        if pending >= MOST_PENDING or self.clock() - self._flushed_at >= FLUSH_GAP:
            return True
        return pending % self.batch == 0 and distributed.running()

    def flush(self) -> list[SeriesRow]:
        """One device-to-host copy for the whole batch."""
        self._flushed_at = self.clock()
        self.pending = _scale_clipped(self.pending)
        if distributed.running():
            self.pending = self._across_ranks(self.pending)
        else:
            self.pending = _combine_shards(self.pending)
            if self.ranks[0] > 1 or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
                alone = sum(row.loss is not None for row in self.pending)
                self.ranks = (max(self.ranks[0], int(os.environ.get("WORLD_SIZE", "1") or 1)), self.ranks[1],
                              self.ranks[2] + alone)
        values = self._values()
        host: list[float] = []
        if values:
            with torch._C.DisableTorchFunction():
                host = torch.stack(values).cpu().tolist()
        return self.rows(host)

    def staged(self) -> list[Tensor] | None:
        """The pending steps' values (loss, norm), 0-d float tensors, in order, for a copy made
        elsewhere (an audited step's one flush, record/step_record.py); None while a sharded
        norm or, with several ranks, the losses still need their all-reduce."""
        if distributed.running() or any(isinstance(row.grad_norm, _Sharded) for row in self.pending):
            return None
        self.pending = _scale_clipped(self.pending)
        return self._values()

    def _values(self) -> list[Tensor]:
        with torch._C.DisableTorchFunction():
            return [v.float().reshape(()) for row in self.pending for v in (row.loss, row.grad_norm)
                    if isinstance(v, Tensor)]   # a float loss (read on the host already) is not copied

    def _across_ranks(self, pending: list[SeriesRow]) -> list[SeriesRow]:
        """With several ranks: each step's loss averaged over the ranks that have one, the
        sharded norms combined and the riders' values summed, in one all-reduce for the whole
        batch. Every rank flushes the same steps (DDP and FSDP keep the ranks in step) and each
        rider gives as many values on every rank, so the calls match."""
        rides = [[v.float().reshape(()) for v in provide()] for provide, _ in self.riders]
        if not pending and not any(rides):
            return pending
        device = distributed.collective_device()
        with torch._C.DisableTorchFunction(), torch.no_grad():
            zero, one = torch.zeros((), device=device), torch.ones((), device=device)
            sharded = [row.grad_norm.shards.float().to(device) for row in pending
                       if isinstance(row.grad_norm, _Sharded)]
            losses = [zero if row.loss is None else torch.tensor(row.loss, device=device) if isinstance(row.loss, float)
                      else row.loss.float().reshape(()).to(device) for row in pending]
            counts = [zero if row.loss is None else one for row in pending]
            summed = distributed.sum_across_ranks(sharded + losses + counts + [v.to(device) for r in rides for v in r])
            shards = iter(summed[:len(sharded)])
            means = summed[len(sharded):len(sharded) + len(pending)]
            counts = summed[len(sharded) + len(pending):len(sharded) + 2 * len(pending)]
            given = len(sharded) + 2 * len(pending)
            for (_, receive), ride in zip(self.riders, rides):
                if ride:
                    receive(summed[given:given + len(ride)])
                given += len(ride)
            combined = []
            for row, total, count in zip(pending, means, counts):
                norm = row.grad_norm
                if isinstance(norm, _Sharded):
                    squares = next(shards)
                    norm = (squares if norm.plain is None else squares + norm.plain.float().to(device)).sqrt()
                combined.append(row._replace(loss=None if row.loss is None else total / count, grad_norm=norm))
        self.ranks = (distributed.world_size(), self.ranks[1] + sum(row.loss is not None for row in pending),
                      self.ranks[2])
        return combined

    def rows(self, host: list[float]) -> list[SeriesRow]:
        """The pending steps as rows, given their staged values on the host."""
        pending, self.pending = self.pending, []
        values = iter(host)
        return [row._replace(loss=_on_host(row.loss, values), grad_norm=_on_host(row.grad_norm, values))
                for row in pending]


def _on_host(value, copied) -> float | None:
    """A pending row's value on the host: a float as it is, a tensor's the next one copied."""
    return value if value is None or isinstance(value, float) else next(copied)


_GRAD = operator.attrgetter("grad")
_PRESENT = functools.partial(operator.is_not, None)
_UNUSUAL = operator.attrgetter("is_sparse", "is_meta")


def present_grads(optimizer) -> list[Tensor]:
    """The optimizer's parameters' gradients that are set, a sparse one as its stored values.

    NOTE: a watch asks this at every step: the .grad reads and the test run in C (map,
    filter, attrgetter), not in a Python loop per parameter (docs/performance.md)."""
    grads = []
    for group in optimizer.param_groups:
        grads.extend(filter(_PRESENT, map(_GRAD, group["params"])))
    if any(map(any, map(_UNUSUAL, grads))):
        grads = [g.coalesce().values() if g.is_sparse else g for g in grads if not g.is_meta]
    return grads


class _Sharded:
    """A step's squared gradient norm: of the plain parameters, and of this rank's shards."""

    def __init__(self, plain: Tensor | None, shards: Tensor) -> None:
        self.plain, self.shards = plain, shards


class _Clipped:
    """A step's norm from the script's clip: its result and max_norm (StepMonitor.offer)."""

    def __init__(self, norm: Tensor, max_norm: float) -> None:
        self.norm, self.max_norm = norm, max_norm


def _scale_clipped(pending: list[SeriesRow]) -> list[SeriesRow]:
    """The clipped gradients' norms of the steps whose norm came from a clip, in a few ops for
    the whole batch: torch scaled them by min(1, max_norm / (norm + 1e-6))."""
    clipped = [row for row in pending if isinstance(row.grad_norm, _Clipped)]
    if not clipped:
        return pending
    with torch._C.DisableTorchFunction(), torch.no_grad():
        device = clipped[0].grad_norm.norm.device
        norms = torch.stack([row.grad_norm.norm.detach().float().reshape(()).to(device) for row in clipped])
        limits = torch.tensor([row.grad_norm.max_norm for row in clipped], dtype=torch.float32, device=device)
        scaled = iter((norms * torch.clamp(limits / (norms + 1e-6), max=1.0)).unbind())
    return [row._replace(grad_norm=next(scaled)) if isinstance(row.grad_norm, _Clipped) else row for row in pending]


def _combine_shards(pending: list[SeriesRow]) -> list[SeriesRow]:
    """Total gradient norms of the sharded steps: one all-reduce for the whole batch."""
    sharded = [row for row in pending if isinstance(row.grad_norm, _Sharded)]
    if not sharded:
        return pending
    with torch._C.DisableTorchFunction(), torch.no_grad():
        summed = iter(distributed.sum_across_ranks([row.grad_norm.shards.float() for row in sharded]))
        combined = []
        for row in pending:
            norm = row.grad_norm
            if isinstance(norm, _Sharded):
                total = next(summed)
                row = row._replace(grad_norm=(total if norm.plain is None else total + norm.plain.float()).sqrt())
            combined.append(row)
    return combined


def _learning_rate(optimizer) -> float | None:
    if optimizer is None or not optimizer.param_groups:
        return None
    lr = optimizer.param_groups[0].get("lr")
    return float(lr) if isinstance(lr, (int, float)) or (isinstance(lr, Tensor) and lr.numel() == 1
                                                           and not lr.is_cuda) else None


_LOW_PRECISION = (torch.float16, torch.bfloat16)


class UpdateMeter:
    """||w_after - w_before|| and ||w_before|| per parameter, for one sampled step; and for a
    float16/bfloat16 parameter, how many of its elements had a nonzero gradient and how many
    of those the step left unchanged (an update below half a unit in the last place rounds
    away: a bfloat16 weight of 0.05 cannot take a step of 1e-4)."""

    def __init__(self) -> None:
        self.params: list = []
        self.before: list[Tensor] = []

    def before_step(self, optimizer: torch.optim.Optimizer) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]
                  if p.requires_grad and not p.is_meta and not p.is_sparse]
        with torch._C.DisableTorchFunction(), torch.no_grad():
            self.params.extend(params)
            # NOTE: one copy of every parameter in one call (x * 1.0 is x, bit for bit), not
            # a detach and a clone per parameter
            self.before.extend(distributed.foreach(torch._foreach_mul, params, 1.0) if params else ())

    def after_step(self) -> tuple[list, list[Tensor], list[Tensor], list, list[Tensor]]:
        """(params, update norms, weight norms, the low-precision params, their (graded, unchanged)
        element counts, two per param) as device scalars; clears the snapshot."""
        if not self.params:
            return [], [], [], [], []
        with torch._C.DisableTorchFunction(), torch.no_grad():
            weights = list(distributed.foreach(torch._foreach_norm, self.before))
            # NOTE: the difference overwrites the snapshot in place, so the probe never holds
            # more than one copy of the parameters (the sign does not change the norm).
            distributed.foreach(torch._foreach_sub_, self.before, self.params)   # under no_grad: no graph, no detach needed
            updates = list(distributed.foreach(torch._foreach_norm, self.before))
            low, counts = self._rounded()
        params, self.params, self.before = self.params, [], []
        return params, updates, weights, low, counts

    def _rounded(self) -> tuple[list, list[Tensor]]:
        """Per float16/bfloat16 parameter with a gradient: (elements whose gradient is nonzero,
        of them those the step left unchanged), from one count over both masks."""
        low, counts = [], []
        for param, change in zip(self.params, self.before):
            grad = param.grad
            if param.dtype not in _LOW_PRECISION or grad is None or grad.is_sparse or grad.shape != change.shape:
                continue
            graded = grad != 0
            both = torch.count_nonzero(torch.stack([graded, graded & (change == 0)]).reshape(2, -1), dim=1)
            low.append(param)
            counts.extend(both.unbind())
        return low, counts
