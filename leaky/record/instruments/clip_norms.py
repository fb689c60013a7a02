"""The norm the user's gradient clipping acted on, against the global norm of the same
gradients (LK403 norm-per-shard, issue 32).

`torch.nn.utils.clip_grad_norm_` (and the deprecated `clip_grad_norm`), `get_total_norm` and
`clip_grads_with_norm_` are patched while the recorder is entered (process/patch.py: put back
on exit, errors included). Only with several ranks (distributed.running()), only on sampled
steps, and only an outermost 2-norm call from the user's code (FSDP1's own
`model.clip_grad_norm_` calls torch's from torch's code: not the user's) is noted: the norm it
computed or was given (its result, or its `total_norm` argument), and, read before it clips,
the squared norms of the gradients it covered, split into whole tensors and shards.

A shard is one rank's piece of a gradient cut across ranks: a DTensor gradient (FSDP2
`fully_shard`), whose local tensor is the shard; a sharded FSDP1 flat parameter's gradient
(`_is_flat_param`, holding fewer elements than the unsharded flat parameter: NO_SHARD keeps
whole copies); or a plain tensor that is one of those (`p.grad.to_local()`, told by its
storage among the tracked parameters' gradients). The global squared norm is the whole
tensors' plus the shards' summed over ranks, ||g||^2 = sum_k ||g_k||^2. The sums ride the
all-reduce of the series' batched flush (InstrumentHost.across_ranks: no collective of its
own), as a block of fixed size per sampled step since the last flush, so the ranks' calls
match whatever each clipped (a rank that clips alone cannot hang the others). Values stay on
the device until the snapshot.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import torch
import torch.nn.utils as nn_utils

from leaky.process import distributed
from leaky.process.frames import is_internal
from leaky.process.patch import Patch, Patches
from leaky.record.instruments import InstrumentHost, instrument

PER_STEP = 4        # clip calls compared per sampled step (the first ones): the all-reduce's fixed size
MOST_NOTED = 64     # comparisons kept per run (the first ones)
# (name in torch.nn.utils, its keyword for the tensors, where its norm_type sits, by position and keyword)
_PATCHED = (("clip_grad_norm_", "parameters", 2), ("clip_grad_norm", "parameters", 2),
            ("get_total_norm", "tensors", 1), ("clip_grads_with_norm_", "parameters", None))
_CLIPS = ("clip_grad_norm_", "clip_grad_norm")   # those whose result is the norm of what they clipped
FLAT, DTENSOR, LOCAL = "FSDP1 flat parameters", "DTensor shards", "local shards (to_local())"


@dataclass(frozen=True)
class ClipNorm:
    """One clip (or norm) call on a sampled step, compared with the global norm."""

    call: str                     # torch.nn.utils' function: clip_grad_norm_, get_total_norm...
    where: tuple[str, int]        # the user's line that called it
    step: int                     # the recorder's step index
    covered: tuple[str, ...]      # what its gradients were: FLAT, DTENSOR, LOCAL and/or "whole tensors"
    tensors: int                  # how many gradients it covered
    dtype: str                    # the least precise of their dtypes (the rounding of its norm)
    norm: torch.Tensor            # the norm it acted on, this rank's (0-d, float32, on the device)
    global_norm: torch.Tensor     # the norm of the same gradients over all ranks
    ranks: int                    # the world size
    norm_mean: torch.Tensor       # the ranks' norms: mean and root mean square (their spread)
    norm_rms: torch.Tensor


@dataclass
class _Pending:
    call: str
    where: tuple[str, int]
    covered: tuple[str, ...]
    tensors: int
    dtype: str
    whole: torch.Tensor           # squared norm of the whole tensors (the same on every rank)
    shards: torch.Tensor          # squared norm of this rank's shards
    norm: torch.Tensor | None = None


@instrument("clip_norms")
class ClipNorms:
    def __init__(self, host: InstrumentHost) -> None:
        self.host = host
        self.noted: list[ClipNorm] = []
        self._steps: dict[int, list[_Pending]] = {}        # sampled step -> its calls, until a flush
        self._flying: list[tuple[int, list[_Pending]]] = []   # those handed to the flush's all-reduce
        self._provided: int | None = None   # the sampled step whose block a flush took while it ran
        self._depth = 0
        self._patches = Patches(Patch(nn_utils, name, functools.partial(self._wrapped, name, keyword, at))
                                for name, keyword, at in _PATCHED if name in vars(nn_utils))
        host.across_ranks(self._provide, self._receive)

    def __enter__(self) -> "ClipNorms":
        self._patches.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._patches.__exit__(*exc)

    def part(self) -> tuple[ClipNorm, ...]:
        return tuple(self.noted)

    def _wrapped(self, name: str, keyword: str, at: int | None, original):
        @functools.wraps(original)
        def clip(*args, **kwargs):
            if self._depth or not self.host.observing or not distributed.running():
                if (not self._depth and name in _CLIPS and not self.host.observing and self.host.norm_wanted()
                        and not distributed.running()):
                    return self._offering(original, keyword, at, args, kwargs)
                return original(*args, **kwargs)
            caller = sys._getframe(1)
            args, kwargs = _listed(args, kwargs, keyword)   # a generator is read once, by both
            self._depth += 1
            calls = self._steps.setdefault(self.host.step, [])
            try:
                before = len(calls)
                with torch._C.DisableTorchFunction(), torch.no_grad():   # leaky's reads are no op of the model's
                    self.host.guarded(self._measure, calls, name, keyword, at, args, kwargs, caller)
                result = original(*args, **kwargs)
            finally:
                self._depth -= 1
            if len(calls) > before:
                self.host.guarded(self._note_norm, calls, kwargs.get("total_norm", args[2] if
                                  len(args) > 2 else None) if name == "clip_grads_with_norm_" else result)
            return result

        return clip

    def _offering(self, original, keyword: str, at: int, args, kwargs):
        """A watch's unsampled step whose monitor takes the norm on a schedule (record/budget.py):
        the script's clip computes the 2-norm anyway, and the monitor may keep it this step."""
        args, kwargs = _listed(args, kwargs, keyword)   # a generator is read once, by both
        result = original(*args, **kwargs)
        start = self.host.clock()
        if not is_internal(sys._getframe(2).f_code.co_filename):
            self.host.guarded(self._offer, keyword, at, args, kwargs, result)
        self.host.own_time(self.host.clock() - start)
        return result

    def _offer(self, keyword: str, at: int, args, kwargs, result) -> None:
        """The clip's result and its max_norm: the norm of the gradients it clipped is the
        result times min(1, max_norm / (result + 1e-6)), as torch scaled them (the monitor
        works it out for a whole batch of steps at its flush: no tensor op here)."""
        if float(kwargs.get("norm_type", args[at] if len(args) > at else 2.0)) != 2.0:
            return
        if not isinstance(result, torch.Tensor) or distributed.is_dtensor(result) or result.numel() != 1:
            return
        max_norm = kwargs.get("max_norm", args[1] if len(args) > 1 else None)
        given = kwargs[keyword] if keyword in kwargs else args[0]
        if max_norm is not None:
            self.host.offer_norm(result, float(max_norm), 1 if isinstance(given, torch.Tensor) else len(given))

    def _measure(self, calls: list, name: str, keyword: str, at: int | None, args, kwargs, caller) -> None:
        """Before the call: what it covers, and the squared norms of those gradients."""
        if len(calls) >= PER_STEP or is_internal(caller.f_code.co_filename):
            return
        if at is not None and float(kwargs.get("norm_type", args[at] if len(args) > at else 2.0)) != 2.0:
            return   # an inf- or 1-norm: not the 2-norm leaky takes
        given = kwargs[keyword] if keyword in kwargs else args[0]
        given = [given] if isinstance(given, torch.Tensor) else given
        pairs = [(None, t) for t in given] if keyword == "tensors" else [(p, p.grad) for p in given]
        pairs = [(p, g) for p, g in pairs if g is not None and not g.is_sparse]
        if not pairs:
            return
        named = [DTENSOR if distributed.is_dtensor(g) else FLAT if p is not None and distributed.is_flat_shard(p)
                 else None for p, g in pairs]
        owned = _shard_storages(self.host.modules.parameters()) if None in named else {}
        kinds, whole, shards = set(), [], []
        for (_, grad), kind in zip(pairs, named):
            kind = kind or (owned.get(grad.data_ptr()) if grad.numel() else None)
            kinds.add(kind or "whole tensors")
            (shards if kind else whole).append(distributed.local(grad))
        zero = torch.zeros((), device=distributed.local(pairs[0][1]).device)
        calls.append(_Pending(
            name, (caller.f_code.co_filename, caller.f_lineno), tuple(sorted(kinds)), len(pairs),
            str(min((g.dtype for _, g in pairs), key=lambda d: torch.finfo(d).bits)).replace("torch.", ""),
            distributed.squared_norm(whole) if whole else zero, distributed.squared_norm(shards) if shards else zero))

    def _note_norm(self, calls: list, norm) -> None:
        """The norm the call computed or was given: a replicated DTensor's local value is the
        global one; a partial one, which no user's clip returns, is left out."""
        pending = calls[-1]
        if distributed.is_dtensor(norm):
            if not all(type(p).__name__ == "Replicate" for p in norm.placements):
                return
            norm = norm.to_local()
        if not isinstance(norm, torch.Tensor):
            norm = torch.tensor(float(norm))
        with torch._C.DisableTorchFunction(), torch.no_grad():
            pending.norm = norm.detach().float().reshape(()).to(pending.shards.device)

    def end_step(self, step: int) -> None:
        """A sampled step has its block of values on every rank, whether or not it clipped (an
        audited step's was handed to the flush already)."""
        if self.host.observing and distributed.running() and step != self._provided:
            self._steps.setdefault(step, [])

    def _provide(self) -> list[torch.Tensor]:
        """At a flush of the series, with several ranks: PER_STEP x (this rank's shards' squared
        norm, the norm, its square) per sampled step since the last flush, zeros where no call
        was noted. The steps are the same on every rank (sampled steps and flushes are counted
        alike), so the sizes match."""
        if self.host.observing:
            self._steps.setdefault(self.host.step, [])
            self._provided = self.host.step
        self._flying, self._steps = sorted(self._steps.items()), {}
        zero = torch.zeros(())
        values = []
        for _, calls in self._flying:
            ready = [c for c in calls if c.norm is not None]
            for index in range(PER_STEP):
                call = ready[index] if index < len(ready) else None
                values += [zero] * 3 if call is None else [call.shards, call.norm, call.norm.square()]
        return values

    def _receive(self, summed: list[torch.Tensor]) -> None:
        """The values summed over the ranks: each noted call's global norm and the ranks' norms."""
        ranks = distributed.world_size()
        for block, (step, calls) in enumerate(self._flying):
            ready = [c for c in calls if c.norm is not None][:PER_STEP]
            for index, call in enumerate(ready):
                if len(self.noted) >= MOST_NOTED:
                    return
                at = 3 * (block * PER_STEP + index)
                shards, norms, squares = summed[at:at + 3]
                self.noted.append(ClipNorm(call.call, call.where, step, call.covered, call.tensors, call.dtype,
                                           call.norm, (call.whole.to(shards.device) + shards).sqrt(), ranks,
                                           norms / ranks, (squares / ranks).sqrt()))
        self._flying = []


def _listed(args: tuple, kwargs: dict, keyword: str) -> tuple[tuple, dict]:
    """The call's parameters (or tensors) as a list when given as an iterable."""
    if keyword in kwargs:
        if not isinstance(kwargs[keyword], torch.Tensor):
            kwargs = {**kwargs, keyword: list(kwargs[keyword])}
    elif args and not isinstance(args[0], torch.Tensor):
        args = (list(args[0]), *args[1:])
    return args, kwargs


def _shard_storages(tracked) -> dict[int, str]:
    """The data pointers of the tracked parameters' sharded gradients, by kind."""
    owned = {}
    for _, _, param in tracked:
        grad = param.grad
        if grad is None or not grad.numel():
            continue
        if distributed.is_dtensor(grad):
            owned[grad.to_local().data_ptr()] = LOCAL
        elif distributed.is_flat_shard(param):
            owned[grad.data_ptr()] = FLAT
    return owned
