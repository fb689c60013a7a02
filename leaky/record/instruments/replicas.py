"""Data-parallel replicas (issue 32): the DistributedDataParallel wrappers of a run, what each
syncs, how the script drives them, and one fingerprint per replica parameter and gradient.

DDP keeps one copy of the model per rank and all-reduces the gradients in backward, so every
rank takes the same step from the same weights. A replica parameter is one that a DDP wrapper
syncs: a parameter of its module that required grad when the wrapper was built and that is
not in DDP's ignore list (`_ddp_params_and_buffers_to_ignore`). Nothing else is compared:
tensor-parallel and FSDP shards (DTensors), per-rank experts and any parameter no DDP wraps
differ by design. Under the same names, two kinds of parameter DDP does not sync are compared
too, because the script meant them to be replicas: one put in the module after wrapping (the
wrapper still syncs the tensor it saw), and one that did not require grad at wrapping and
does now.

Recorded while the recorder is entered (process/patch.py, put back on exit):
- `DistributedDataParallel.__init__`: each wrapper built, its line, the step, the tensors it
  syncs, `find_unused_parameters` and `init_sync`; a wrapper built before leaky observed is
  noted at its first forward;
- `DistributedDataParallel.forward`: its forwards per step, and `require_backward_grad_sync`
  at the step's last one (False under `no_sync()`: DDP then prepares no all-reduce for the
  backward of that forward), with the line of the first unsynced forward that ended a step;
  a forward pre-hook on the wrapped module (removed on exit)
  counts calls that bypass the wrapper with grad enabled, and keeps the first one's line.

On each sampled step, at the one exchange across ranks (record/steps.py), `fingerprints()`
gives one float64 row per replica parameter: the L2 norm of the parameter and of its gradient
(-1: no gradient), from one fused norm each for all of them (torch._foreach_norm); the exchange
returns their largest and smallest value over the ranks, and `compared` keeps, on the device,
each row's largest relative spread and the first step it exceeded `config.replica_tolerance`.
"""
from __future__ import annotations

import functools
import weakref
import zlib
from dataclasses import dataclass, field

import torch
from torch import Tensor

from leaky.process.distributed import is_dtensor
from leaky.process.patch import Patch, Patches
from leaky.record.instruments import InstrumentHost, instrument
from leaky.record.sites import SourceLocator

MOST_STEPS = 4096   # sampled steps whose wrapper use is kept (the first ones)


@dataclass
class Wrapper:
    """One DDP wrapper seen: how it was built, and how the current step drives it."""

    ddp: weakref.ref
    module: weakref.ref                # the module it wraps (ddp.module)
    where: tuple[str, int] | None      # the user's line that built it
    built_step: int | None             # the step it was built at (None: built before leaky observed)
    synced: dict[str, int]             # name -> id of the tensor the wrapper syncs
    frozen: tuple[str, ...]            # names it does not sync because they did not require grad then
    find_unused: bool
    init_sync: bool                    # rank 0's weights were broadcast at construction
    forwards: int = 0                  # this step: forwards through the wrapper
    sync_last: bool | None = None      # this step: require_backward_grad_sync at its last forward
    bypasses: int = 0                  # this step: grad-enabled calls of the module not through the wrapper
    bypass_at: tuple[str, int] | None = None   # the first such call's line
    unsynced_at: tuple[str, int] | None = None  # this step: the line of its last forward, when unsynced
    no_sync_at: tuple[str, int] | None = None   # the first step's unsynced last forward, when one ended a step
    hook: object = None                # the forward pre-hook's handle


@dataclass(frozen=True)
class Row:
    """One compared parameter: wrapper index, name in the wrapped module, and why it is compared."""

    wrapper: int
    name: str
    status: str    # "synced" | "replaced" (not the tensor DDP syncs) | "frozen_at_wrap" (required no grad then)


@dataclass
class Segment:
    """Rows compared with one layout, from step `start`: device tensors, replaced, never mutated."""

    rows: tuple[Row, ...]
    start: int
    steps: int = 0
    worst: Tensor | None = None      # (n, 2): largest relative spread of (param, grad) so far
    first: Tensor | None = None      # (n, 2): first step beyond tolerance, -1 none
    at_first: Tensor | None = None   # (n, 4): L2 norm (max, min) of param, then grad, at that step
    missing: Tensor | None = None    # (n,): steps the gradient was None on some ranks only


@dataclass(frozen=True)
class ReplicasPart:
    wrappers: tuple[dict, ...]
    segments: tuple[Segment, ...]
    use: dict = field(default_factory=dict)   # step -> per wrapper (forwards, sync_last, bypasses)
    uncompared: int = 0   # sampled steps whose replicas the ranks could not compare (layouts differ)
    by_rank: tuple | None = None   # (step, rows, (ranks, rows, 2) device tensor): the first step some differ


@instrument("replicas")
def _make(host: InstrumentHost):
    if not torch.distributed.is_available():
        return None
    return Replicas(host)


class Replicas:
    def __init__(self, host: InstrumentHost) -> None:
        from torch.nn.parallel import DistributedDataParallel

        self.host = host
        self.locator = SourceLocator()
        self.wrappers: list[Wrapper] = []
        self.segments: list[Segment] = []
        self.use: dict[int, tuple] = {}
        self._inside = 0   # wrapper forwards running
        self._rows: tuple[Row, ...] = ()
        self.uncompared = 0
        self.by_rank: tuple | None = None   # every rank's fingerprints at the first step some differed
        self._patches = Patches((Patch(DistributedDataParallel, "__init__", self._built),
                                 Patch(DistributedDataParallel, "forward", self._forward)))

    def __enter__(self) -> "Replicas":
        self._patches.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._patches.__exit__(*exc)
        for wrapper in self.wrappers:
            if wrapper.hook is not None:
                wrapper.hook.remove()
                wrapper.hook = None

    def end_step(self, step: int) -> None:
        for wrapper in self.wrappers:
            if wrapper.sync_last is False and wrapper.no_sync_at is None:
                wrapper.no_sync_at = wrapper.unsynced_at
            wrapper.forwards, wrapper.sync_last, wrapper.bypasses, wrapper.unsynced_at = 0, None, 0, None

    def part(self) -> ReplicasPart:
        wrappers = tuple({"module": w.module, "where": w.where, "built_step": w.built_step,
                          "find_unused": w.find_unused, "init_sync": w.init_sync, "bypass_at": w.bypass_at,
                          "no_sync_at": w.no_sync_at,
                          "params": len(w.synced)} for w in self.wrappers)
        segments = tuple(Segment(s.rows, s.start, s.steps, s.worst, s.first, s.at_first, s.missing)
                         for s in self.segments)
        return ReplicasPart(wrappers, segments, dict(self.use), self.uncompared, self.by_rank)

    # -- the wrappers --------------------------------------------------------------
    def _built(self, original):
        @functools.wraps(original)
        def __init__(ddp, module, *args, **kwargs):
            original(ddp, module, *args, **kwargs)
            self.host.guarded(self._note, ddp, self.host.step, kwargs.get("init_sync", True))
        return __init__

    def _forward(self, original):
        @functools.wraps(original)
        def forward(ddp, *args, **kwargs):
            wrapper = self._wrapper(ddp)
            if wrapper is not None:
                wrapper.forwards += 1
                if torch.is_grad_enabled():   # a no_grad forward prepares no backward
                    wrapper.sync_last = bool(ddp.require_backward_grad_sync)
                    if not wrapper.sync_last and wrapper.no_sync_at is None:
                        found = self.locator.locate()   # the micro-step's forward, beside its no_sync()
                        wrapper.unsynced_at = found[:2] if found else None
            self._inside += 1
            try:
                return original(ddp, *args, **kwargs)
            finally:
                self._inside -= 1
        return forward

    def _wrapper(self, ddp) -> Wrapper | None:
        known = next((w for w in self.wrappers if w.ddp() is ddp), None)
        if known is None:   # built before leaky observed: noted at its first forward
            self.host.guarded(self._note, ddp, None, True)
            known = next((w for w in self.wrappers if w.ddp() is ddp), None)
        return known

    def _note(self, ddp, step: int | None, init_sync: bool) -> None:
        module = ddp.module
        ignored = set(getattr(ddp, "parameters_to_ignore", ()))
        named = [(name, p) for name, p in module.named_parameters() if name not in ignored and not is_dtensor(p)]
        found = self.locator.locate(ddp) if step is not None else None
        where = found[:2] if found else None
        wrapper = Wrapper(weakref.ref(ddp), weakref.ref(module), where, step,
                          {name: id(p) for name, p in named if p.requires_grad},
                          tuple(name for name, p in named if not p.requires_grad),
                          bool(getattr(ddp, "find_unused_parameters", False)), bool(init_sync))
        wrapper.hook = module.register_forward_pre_hook(functools.partial(self._module_called, wrapper))
        self.wrappers.append(wrapper)

    def _module_called(self, wrapper: Wrapper, module, args) -> None:
        if self._inside or not torch.is_grad_enabled():
            return
        wrapper.bypasses += 1
        if wrapper.bypass_at is None:
            found = self.locator.locate()
            wrapper.bypass_at = found[:2] if found else None

    # -- the fingerprints ------------------------------------------------------------
    def fingerprints(self) -> tuple[Tensor | None, int, bool]:
        """(rows x 2 float64 fingerprints or None, the layout's signature, whether every rank's
        values are still wanted: until the first step some differ), for the exchange."""
        rows, params = self._layout()
        self._rows = rows
        signature = zlib.crc32(repr([(r.wrapper, r.name, tuple(p.shape)) for r, p in zip(rows, params)]).encode())
        wanted = self.by_rank is None
        if not params:
            return None, signature, wanted
        with torch._C.DisableTorchFunction(), torch.no_grad():
            return _norms(params), signature, wanted

    def _layout(self) -> tuple[tuple[Row, ...], list[Tensor]]:
        rows, params = [], []
        for index, wrapper in enumerate(self.wrappers):
            ddp, module = wrapper.ddp(), wrapper.module()
            if ddp is None or module is None:
                if wrapper.hook is not None:   # a wrapper gone (the model wrapped afresh): its hook too
                    wrapper.hook.remove()
                    wrapper.hook = None
                continue
            for name, p in module.named_parameters():
                status = _status(wrapper, name, p)
                if status is not None:
                    rows.append(Row(index, name, status))
                    params.append(p)
        return tuple(rows), params

    def compared(self, step: int, spread: Tensor | None, by_rank: Tensor | None = None) -> None:
        """Fold one exchange: `spread` (2, rows, 2), the largest and smallest fingerprint over the
        ranks; `by_rank` (ranks, rows, 2), every rank's, at the first step some differ."""
        if len(self.use) < MOST_STEPS:
            self.use[step] = tuple((w.forwards, w.sync_last, w.bypasses) for w in self.wrappers)
        if spread is None:
            self.uncompared += bool(self._rows)   # the other ranks hold another layout
            return
        if by_rank is not None:
            self.by_rank = (step, self._rows, by_rank)
        if not self.segments or self.segments[-1].rows != self._rows:
            self.segments.append(Segment(self._rows, step))
        with torch._C.DisableTorchFunction(), torch.no_grad():
            _fold(self.segments[-1], step, spread, self.host.config.replica_tolerance)


def _status(wrapper: Wrapper, name: str, p: Tensor) -> str | None:
    """Why `p`, at `name` in the wrapped module now, is compared; None: it is not a replica."""
    if is_dtensor(p):
        return None
    if name in wrapper.synced:
        return "synced" if wrapper.synced[name] == id(p) else "replaced"
    if name in wrapper.frozen and p.requires_grad:
        return "frozen_at_wrap"
    return None


def _norms(params: list[Tensor]) -> Tensor:
    """(n, 2) float64: the L2 norm of each parameter and of its gradient (-1 without one).

    NOTE: a norm, not a hash of the bytes: one fused kernel for all parameters. Two tensors that
    differ and keep the same norm (a sign flip, a permutation) are not told apart; weights
    trained on different gradients, or initialised from different seeds, do not."""
    device = params[0].device
    weights = _stacked(torch._foreach_norm(params, 2, dtype=torch.float64), device)
    have = [i for i, p in enumerate(params) if p.grad is not None and not p.grad.is_sparse]
    grads = torch.full((len(params),), -1.0, dtype=torch.float64, device=device)
    if have:
        norms = torch._foreach_norm([params[i].grad for i in have], 2, dtype=torch.float64)
        grads[torch.tensor(have, device=device)] = _stacked(norms, device)
    return torch.stack([weights, grads], dim=1)


def _stacked(norms: list[Tensor], device) -> Tensor:
    if all(n.device == device for n in norms):
        return torch.stack(norms)
    return torch.stack([n.to(device) for n in norms])   # parameters on several devices


def _fold(segment: Segment, step: int, spread: Tensor, tolerance: float) -> None:
    """Relative spread of each row's param and grad norms, worst so far and first step past tolerance.

    The relative spread of a norm is (max - min) / max over the ranks. A gradient that is None on
    some ranks and present on others (-1 on some) counts as infinitely apart."""
    high, low = spread[0], spread[1]
    relative = torch.where(high > 0, (high - low) / high.clamp_min(torch.finfo(torch.float64).tiny),
                           torch.zeros_like(high))
    missing = (low[:, 1] < 0) & (high[:, 1] >= 0)
    relative[:, 1] = torch.where(missing, torch.full_like(relative[:, 1], float("inf")), relative[:, 1])
    norms = torch.stack([high[:, 0], low[:, 0], high[:, 1], low[:, 1]], dim=1)
    if segment.worst is None:
        segment.worst = relative
        segment.first = torch.full(relative.shape, -1, dtype=torch.int64, device=relative.device)
        segment.at_first = torch.zeros_like(norms)
        segment.missing = torch.zeros(relative.shape[0], dtype=torch.int64, device=relative.device)
    else:
        segment.worst = torch.maximum(segment.worst, relative)
    new = (relative > tolerance) & (segment.first < 0)
    segment.first = torch.where(new, torch.full_like(segment.first, step), segment.first)
    segment.at_first = torch.where(new.repeat_interleave(2, dim=1), norms, segment.at_first)
    segment.missing = segment.missing + missing.long()
    segment.steps += 1
