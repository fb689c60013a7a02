"""Several processes (torchrun, DDP, FSDP): reduce what must be judged globally.

Uses the process group the user's script set up; never starts one. Per sampled step:
- activation counters are summed across ranks (a unit is dead only if it never fired on
  any rank; `last_active` takes the latest step), into a global copy, so the next step's
  local sums stay local;
- the first non-finite event of each rank is exchanged, so rank 0 can report an origin
  that happened on another rank's data.
Parameter gradients under DDP are already averaged across ranks by DDP itself, so their
norms are those of the full gradient. Only rank 0 prints and writes.
"""
from __future__ import annotations

import os

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


def _same_layout(units: dict) -> bool:
    """All ranks hold the same activation sites with the same unit counts (else: skip)."""
    layout = [(site, stats.units) for site, stats in sorted(units.items())]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, layout)
    return all(other == layout for other in gathered)


def reduce_units(units: dict) -> dict[int, dict] | None:
    """Global copies of the ReLU/flat counters: {site: {"active", "flat", "last_active", "samples"}}."""
    if not units or not _same_layout(units):
        return None
    result = {}
    for site, stats in sorted(units.items()):
        entry = {"samples": stats.samples * dist.get_world_size()}
        for name, op in (("active", dist.ReduceOp.SUM), ("flat", dist.ReduceOp.SUM), ("last_active", dist.ReduceOp.MAX)):
            value = getattr(stats, name)
            if value is not None:
                copy = value.detach().clone()
                dist.all_reduce(copy, op=op)
                entry[name] = copy
        result[site] = entry
    return result


def gather_events(local: dict | None) -> list[dict]:
    """Every rank's first non-finite event (None where a rank has none), each with its rank."""
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, local)
    return [dict(event, rank=r) for r, event in enumerate(gathered) if event is not None]


__all__ = ["running", "rank", "is_main", "reduce_units", "gather_events", "torch"]
