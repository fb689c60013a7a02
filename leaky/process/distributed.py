"""Several processes (torchrun, DDP, FSDP): reduce what must be judged globally.

Every collective of leaky is here. Uses the process group the user's script set up; never
starts one. Per sampled step, one call, `exchange`, three collectives whatever the model:
- activation counters are summed across ranks (a unit is dead only if it never fired on
  any rank; `last_active` takes the latest step), into a global copy, so the next step's
  local sums stay local;
- the first non-finite event of each rank is exchanged, so rank 0 can report an origin
  that happened on another rank's data;
- the replicas' fingerprints (record/instruments/replicas.py) are reduced to their max and
  min over the ranks (LK401, LK402).
Parameter gradients under DDP are already averaged across ranks by DDP itself, so their
norms are those of the full gradient. Under FSDP2 they are DTensor shards: their norms are
combined across ranks at the flush (`materialise`, `sharded_squares`). Only rank 0 prints
and writes.
"""
from __future__ import annotations

import itertools
import operator
import os
from typing import NamedTuple

import torch
import torch.distributed as dist


def running() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank: from the process group if there is one, else torchrun's env."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0") or 0)


def is_main() -> bool:
    return rank() == 0


class Exchanged(NamedTuple):
    """What the ranks told each other at one sampled step."""

    units: dict[int, dict] | None   # activation counters summed across ranks; None: layouts differ
    events: list[dict]              # each rank's first non-finite event, with its rank; [] when not asked
    replicas: torch.Tensor | None = None   # (2, rows, 2): each replica fingerprint's max and min over the ranks
    replica_ranks: torch.Tensor | None = None   # (ranks, rows, 2): every rank's, once: the first step some differ


_COUNTERS = ("active", "flat")   # summed over the ranks; last_active: the latest over them


def exchange(units: dict, event: dict | None, events_wanted: bool,
             fingerprints: tuple[torch.Tensor | None, int, bool] = (None, 0, False)) -> Exchanged:
    """The one exchange of a sampled step, called by every rank at the same step (DDP keeps
    ranks in step; record/steps.py, after the step's flush): the activation counters summed
    (a unit is dead only if it never fired on any rank), while `events_wanted` every rank's
    first non-finite event (`event`: this rank's), and the spread of the replica fingerprints
    (`fingerprints`: this rank's (rows, 2) float64 values, its layout's signature, and whether
    every rank's values are wanted, at the first step they differ).

    Three collectives, whatever the model: one gather of the layouts (and the events), one
    SUM of every counter of every site, and one MAX of every site's last active step with the
    fingerprints and their negatives (whose halves give each fingerprint's max and, negated,
    its min). A part whose layout differs on some rank is left out on every rank (nothing
    is compared), so the reductions always match. derive/ranks.py and
    record/instruments/replicas.py fold what it returns; neither makes a collective call."""
    fingerprints_here, signature, ranks_wanted = fingerprints
    rows = 0 if fingerprints_here is None else fingerprints_here.shape[0]
    layout = [(site, stats.units) for site, stats in sorted(units.items())]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (layout, rows, signature, event if events_wanted else None))
    same_units = bool(layout) and all(other[0] == layout for other in gathered)
    same_rows = bool(rows) and all(other[1:3] == (rows, signature) for other in gathered)
    events = [dict(other[3], rank=r) for r, other in enumerate(gathered) if other[3] is not None]
    device = collective_device()
    ordered = [stats for _, stats in sorted(units.items())] if same_units else []
    summed = _reduced([getattr(stats, name) for stats in ordered for name in _COUNTERS], dist.ReduceOp.SUM, device)
    latest = [stats.last_active for stats in ordered]
    flat = fingerprints_here.to(device).reshape(-1) if same_rows else None
    extra = [flat, -flat] if flat is not None else []
    maxed = _reduced(latest + extra, dist.ReduceOp.MAX, device)
    result = None
    if same_units:
        world = dist.get_world_size()
        result = {}
        counters = iter(summed)
        for (site, stats), last in zip(sorted(units.items()), maxed):
            entry = {"samples": stats.samples * world, "counted": stats.counted * world}
            for name in _COUNTERS:
                value = next(counters)
                if value is not None:
                    entry[name] = value
            if last is not None:
                entry["last_active"] = last
            result[site] = entry
    replicas, every = None, None
    if flat is not None:
        high, low = maxed[len(latest)], -maxed[len(latest) + 1]
        replicas = torch.stack([high, low]).reshape(2, *fingerprints_here.shape)
        if ranks_wanted and not torch.equal(replicas[0], replicas[1]):
            copies = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
            dist.all_gather(copies, flat)
            every = torch.stack(copies).reshape(len(copies), *fingerprints_here.shape)
    return Exchanged(result, events, replicas, every)


def _reduced(values: list, op, device) -> list:
    """One all-reduce of several tensors (None entries kept as None): packed into one float64
    buffer, reduced, and given back in their own shapes, dtypes and devices. Counts and step
    indices are whole numbers, exact in float64."""
    present = [v for v in values if v is not None]
    if not present:
        return list(values)
    with torch.no_grad():
        buffer = torch.cat([v.detach().to(device=device, dtype=torch.float64).reshape(-1) for v in present])
        dist.all_reduce(buffer, op=op)
        pieces = iter(buffer.split([v.numel() for v in present]))
        return [None if v is None else next(pieces).reshape(v.shape).to(device=v.device, dtype=v.dtype)
                for v in values]


def collective_device() -> torch.device:
    """Where the process group's collectives take their tensors: the current GPU under NCCL."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def is_dtensor(value) -> bool:
    """A DTensor: an FSDP2 (`fully_shard`) or tensor-parallel parameter or gradient."""
    return type(value).__name__ == "DTensor" and hasattr(value, "to_local")


def is_flat_shard(param) -> bool:
    """An FSDP1 flat parameter holding one rank's shard (fewer elements than the whole: NO_SHARD
    keeps whole copies)."""
    whole = getattr(param, "_unpadded_unsharded_size", None)
    return getattr(param, "_is_flat_param", False) and whole is not None and param.numel() < whole.numel()


def foreach(fn, first: list, *others, **kwargs) -> list | None:
    """A torch._foreach_* call `fn(first, *others, **kwargs)`, made on the plain tensors and on
    the DTensors apart when `first` mixes them (tensor parallelism shards some layers of a
    model and leaves others whole, and a foreach call refuses the mix); the results in the
    order of `first` (None for an in-place call). `others`: lists paired with `first`, or
    scalars passed as they are."""
    if "DTensor" not in {type(t).__name__ for t in first} or all(map(is_dtensor, first)):
        return fn(first, *others, **kwargs)
    kinds = [is_dtensor(t) for t in first]
    results: list = [None] * len(first)
    for kind in (False, True):
        picked = [i for i, k in enumerate(kinds) if k == kind]
        out = fn([first[i] for i in picked],
                 *([other[i] for i in picked] if isinstance(other, (list, tuple)) else other for other in others), **kwargs)
        if out is None:
            continue
        for i, value in zip(picked, out):
            results[i] = value
    return None if all(r is None for r in results) else results


def local(value):
    """This rank's shard of a DTensor (the tensor itself otherwise): for per-rank probes."""
    return value.to_local() if is_dtensor(value) else value


def materialise(pieces: list) -> list:
    """Replace DTensor scalars by their global values, one collective per placement kind.

    The norm of a sharded tensor is a DTensor whose placement says how the shards combine
    (a 2-norm: sqrt of the sum of the squared shard norms); stacking the scalars of one
    placement and calling `full_tensor()` combines them all in one collective. Every rank
    flushes the same sampled step with the same values in the same order, so the
    collectives match.
    """
    if "DTensor" not in {type(piece).__name__ for piece in pieces}:
        return pieces   # the usual case, without a call per piece (a step holds ~4 values per node)
    groups: dict[str, list[int]] = {}
    for index, piece in enumerate(pieces):
        if is_dtensor(piece):
            groups.setdefault(repr(piece.placements), []).append(index)
    if not groups:
        return pieces
    pieces = list(pieces)
    for indices in groups.values():
        full = torch.stack([pieces[i].float().reshape(()) for i in indices]).full_tensor()
        for position, index in enumerate(indices):
            pieces[index] = full[position]
    return pieces


# NOTE: a watch takes the norm of every gradient at every step. `_foreach_norm` is one
# fused kernel on a GPU, but on the CPU it calls a norm per tensor, at a fixed cost each
# whatever the size. The small ones are copied into one buffer by one C++ call
# (flatten_dense_tensors, as DDP's buckets are) and normed once, for the price of a copy of
# at most _FLAT_LIMIT elements (docs/performance.md).
_FLAT_BELOW = 1 << 16    # elements: a gradient this small is copied, a larger one normed alone
_FLAT_LIMIT = 1 << 22    # elements copied at most; past that, every gradient is normed alone
_NUMEL = torch.Tensor.numel
_TYPE = operator.attrgetter("dtype", "device")


def total_norm(grads: list) -> torch.Tensor | None:
    """The 2-norm of all the gradients, as float32, when none is sharded and all share one
    dtype and device (the usual case); None otherwise (see sharded_squares). No Python runs
    per gradient: the tests and the splits are C calls (map, compress)."""
    if "DTensor" in {type(g).__name__ for g in grads}:
        return None
    kinds = set(map(_TYPE, grads))
    if len(kinds) != 1:
        return None
    (dtype, device), = kinds
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else None   # their own would overflow
    norms = None
    if device.type == "cpu":
        small = list(map(_FLAT_BELOW.__gt__, map(_NUMEL, grads)))
        flat = list(itertools.compress(grads, small))
        if len(flat) > 1 and sum(map(_NUMEL, flat)) <= _FLAT_LIMIT:
            rest = list(itertools.compress(grads, map(operator.not_, small)))
            norms = [torch.linalg.vector_norm(torch._C._nn.flatten_dense_tensors(flat), dtype=wide)]
            if rest:
                norms += torch._foreach_norm(rest, dtype=wide)
    if norms is None:
        norms = torch._foreach_norm(grads, dtype=wide)
    total = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))
    return total if total.dtype == torch.float32 else total.float()


def sharded_squares(grads: list) -> tuple:
    """(squared norm of the plain gradients, squared norm of this rank's shards or None)."""
    # NOTE: a type-name test inline, not is_dtensor per gradient: this runs at every step of a
    # watch, and a call per parameter was most of what an unsampled step spent in leaky.
    if "DTensor" not in {type(g).__name__ for g in grads}:
        plain, shards = grads, []
    else:
        plain = [g for g in grads if not is_dtensor(g)]
        shards = [g.to_local() for g in grads if is_dtensor(g)]
    return (squared_norm(plain) if plain else None), (squared_norm(shards) if shards else None)


def squared_norm(tensors: list) -> torch.Tensor:
    """The squared 2-norm of plain tensors together, a float32 0-d tensor."""
    # NOTE: one stack per dtype, then one cast: not one .float() per parameter (a watch
    # takes this norm at every step).
    norms = torch._foreach_norm(tensors)
    dtypes = {norm.dtype for norm in norms}
    if len(dtypes) == 1:
        return torch.stack(norms).float().square().sum()
    return torch.stack([torch.stack([n for n in norms if n.dtype == d]).float().square().sum() for d in dtypes]).sum()


def world_size() -> int:
    """How many ranks run (1 without a process group)."""
    return dist.get_world_size() if running() else 1


def sum_across_ranks(values: list) -> list:
    """One all-reduce (sum) of a list of 0-d tensors; returns the summed values."""
    if not values:
        return values
    stacked = torch.stack(values)
    if running():
        dist.all_reduce(stacked)
    return list(stacked)


__all__ = ["running", "rank", "is_main", "exchange", "Exchanged", "foreach", "is_dtensor", "is_flat_shard", "local", "materialise",
           "sharded_squares", "squared_norm", "sum_across_ranks", "world_size", "collective_device", "torch",
           "total_norm"]
