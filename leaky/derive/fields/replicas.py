"""`stats.derived["replicas"]`: DDP's replicas compared across ranks (record/instruments/replicas.py).

Per compared parameter: the first sampled step its weights, and its gradient, differed across
ranks beyond `config.replica_tolerance`, the largest relative spread, the L2 norms (largest,
smallest over the ranks) at that first step, and the ranks grouped by equal values at the
first step anything differed; per wrapper: where and when it was built and how
it was driven; per sampled step: each wrapper's forwards, `require_backward_grad_sync` at the
last one, and the calls that bypassed it. One device-to-host copy per segment of rows.
"""
from __future__ import annotations

import math

import torch

from leaky.derive.fields import derived
from leaky.record.run_record import RunRecord


@derived("replicas")
def replicas(run: RunRecord, sums) -> dict:
    """{"wrappers": (...), "params": (...), "use": {step: ((forwards, sync_last, bypasses), ...)},
    "uncompared_steps": sampled steps whose ranks held different layouts, so compared nothing}."""
    part = run.parts.get("replicas")
    if part is None:
        return {"wrappers": (), "params": (), "use": {}, "uncompared_steps": 0}
    keys = {id(info.module): info.key for info in run.modules.infos}
    wrappers = tuple(_wrapper(run, keys, w) for w in part.wrappers)
    rows: dict[tuple[int, str], dict] = {}
    for segment in part.segments:
        if segment.worst is None:
            continue
        worst, first, at_first, missing = (t.tolist() for t in _host(segment))
        for index, row in enumerate(segment.rows):
            _merge(rows, row, segment.start, worst[index], first[index], at_first[index], missing[index])
    if part.by_rank is not None:
        _name_ranks(rows, *part.by_rank)
    return {"wrappers": wrappers, "params": tuple(rows.values()), "use": dict(part.use),
            "uncompared_steps": part.uncompared}


def _host(segment) -> tuple:
    with torch._C.DisableTorchFunction():
        return segment.worst.cpu(), segment.first.cpu(), segment.at_first.cpu(), segment.missing.cpu()


def _wrapper(run: RunRecord, keys: dict, wrapper: dict) -> dict:
    module = wrapper["module"]()
    key = None if module is None else keys.get(id(module))
    return {"module": run.modules.name(key) if key is not None else None,
            "source": _source(wrapper["where"]), "built_step": wrapper["built_step"],
            "find_unused": wrapper["find_unused"], "init_sync": wrapper["init_sync"],
            "bypass_source": _source(wrapper["bypass_at"]), "no_sync_source": _source(wrapper["no_sync_at"]),
            "params": wrapper["params"]}


def _source(where) -> dict | None:
    return None if where is None else {"file": where[0], "line": where[1]}


def _merge(rows: dict, row, start: int, worst: list, first: list, at_first: list, missing: int) -> None:
    """Fold one segment's numbers of a row into its entry (a row may be compared in several segments)."""
    entry = rows.setdefault((row.wrapper, row.name), {
        "name": row.name, "module": row.name.rpartition(".")[0], "wrapper": row.wrapper, "status": row.status,
        "first_compared": start, "param_first_step": None, "param_spread": 0.0, "param_norms": None,
        "grad_first_step": None, "grad_spread": 0.0, "grad_norms": None, "grad_missing_steps": 0,
        "param_ranks": None, "grad_ranks": None})
    if row.status != "synced":
        entry["status"] = row.status
    entry["grad_missing_steps"] += missing
    for kind, column in (("param", 0), ("grad", 1)):
        if math.isfinite(worst[column]):
            entry[f"{kind}_spread"] = max(entry[f"{kind}_spread"], worst[column])
        if first[column] >= 0 and (entry[f"{kind}_first_step"] is None or first[column] < entry[f"{kind}_first_step"]):
            entry[f"{kind}_first_step"] = first[column]
            entry[f"{kind}_norms"] = (at_first[2 * column], at_first[2 * column + 1])


def _name_ranks(rows: dict, step: int, layout: tuple, values) -> None:
    """The ranks grouped by equal values, largest group first, for each row that first differed at
    `step`, the step every rank's fingerprints were gathered."""
    with torch._C.DisableTorchFunction():
        values = values.cpu().tolist()   # [rank][row][param, grad]
    for index, row in enumerate(layout):
        entry = rows.get((row.wrapper, row.name))
        for kind, column in (("param", 0), ("grad", 1)):
            if entry is not None and entry[f"{kind}_first_step"] == step:
                entry[f"{kind}_ranks"] = _groups([by_rank[index][column] for by_rank in values])


def _groups(values: list[float]) -> list[list[int]]:
    groups: dict[float, list[int]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(value, []).append(rank)
    return sorted(groups.values(), key=lambda group: (-len(group), group[0]))
