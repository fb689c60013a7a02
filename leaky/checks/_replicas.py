"""What LK401 replicas-diverged and LK402 gradients-not-synced share: the replica parameters that
differ across ranks, how much, and the cause the run shows (stats.derived["replicas"],
derive/fields/replicas.py).

A replica is a parameter a DistributedDataParallel wrapper syncs. DDP all-reduces every
gradient in backward and every rank receives the same bytes of the average, so every rank
holds the same gradient and, applying the same optimizer step to the same weights, the same
weights: any difference beyond the rounding of the fingerprint itself is real.
"""
from __future__ import annotations

from leaky.finding import Source
from leaky.numbers import line_of, num
from leaky.stats import AuditStats

_SHOWN = 3   # parameters named in a message


def replicas(stats: AuditStats) -> dict:
    return stats.derived.get("replicas") or {"wrappers": (), "params": (), "use": {}, "uncompared_steps": 0}


def differing(data: dict, kind: str) -> list[dict]:
    """The compared parameters whose `kind` ("param" or "grad") differed on some sampled step,
    earliest first, then widest at that step (not over the run: a watch's later passes keep
    the order, and the parameter they name)."""
    rows = [row for row in data["params"] if row[f"{kind}_first_step"] is not None]
    return sorted(rows, key=lambda row: (row[f"{kind}_first_step"], -_spread_at_first(row, kind), row["name"]))


def _spread_at_first(row: dict, kind: str) -> float:
    high, low = row[f"{kind}_norms"] or (0.0, 0.0)
    if low < 0 <= high:
        return float("inf")   # a gradient on some ranks only
    return (high - low) / high if high > 0 else 0.0


def named(rows: list[dict], kind: str) -> str:
    """The first few parameters with their spread across ranks, and how many more."""
    parts = [_one(row, kind) for row in rows[:_SHOWN]]
    more = f" and {len(rows) - _SHOWN} more" if len(rows) > _SHOWN else ""
    return "; ".join(parts) + more


def ranks_apart(row: dict, kind: str) -> str:
    """Which ranks hold other values, from the ranks grouped by equal values ("" when not known)."""
    groups = row.get(f"{kind}_ranks")
    if not groups or len(groups) < 2:
        return ""
    total = sum(map(len, groups))
    if 2 * len(groups[0]) > total:
        others = sorted(rank for group in groups[1:] for rank in group)
        return f"{_ranks(others)} {'differs' if len(others) == 1 else 'differ'} from {_ranks(groups[0])}"
    if total == 2:
        return "ranks 0 and 1 differ"
    if len(groups) == total:
        return f"all {total} ranks differ from each other"
    return "the ranks split into " + "; ".join(_ranks(group) for group in groups)


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _one(row: dict, kind: str) -> str:
    norms = row[f"{kind}_norms"]
    if kind == "grad" and row["grad_missing_steps"] and (norms is None or min(norms) < 0):
        return f"{row['name']} (a gradient on some ranks, none on others)"
    high, low = norms
    return (f"{row['name']}: L2 norm {num(high)} on one rank, {num(low)} on another, a relative spread of "
            f"{num(_spread_at_first(row, kind))} (at most {num(row[f'{kind}_spread'])} over the run)")


def source(wrapper: dict, key: str = "source") -> Source | None:
    where = wrapper.get(key)
    return None if where is None else Source(where["file"], where["line"])


def cause(data: dict, rows: list[dict], step: int, kind: str) -> tuple[str, Source | None, str]:
    """(why, the line to look at, the cause's name) for the rows that differ from `step` on."""
    index = rows[0]["wrapper"]
    wrapper = data["wrappers"][index]
    built = source(wrapper)
    at = f" built at {line_of(built)}" if built else ""
    uses = [use[index] for s, use in sorted(data["use"].items()) if s <= step and index < len(use)]
    statuses = {row["status"] for row in rows}
    if any(forwards == 0 and bypasses for forwards, _, bypasses in uses):
        by = source(wrapper, "bypass_source")
        return (f"The forward at {line_of(by) if by else 'an unknown line'} calls the wrapped module itself, "
                f"not the DDP wrapper{at}: the wrapper's forward did not run on a step whose parameters got "
                "gradients, so its backward all-reduced nothing and each rank stepped on its own gradient.",
                by or built, "bypassed")
    if "replaced" in statuses:
        names = [row["name"] for row in rows if row["status"] == "replaced"]
        return (f"{', '.join(names[:_SHOWN])} {'was' if len(names) == 1 else 'were'} put in the module after the "
                f"wrapper{at}: DDP still all-reduces the tensors it saw when it was built, not these.",
                built, "replaced")
    if "frozen_at_wrap" in statuses:
        names = [row["name"] for row in rows if row["status"] == "frozen_at_wrap"]
        return (f"{', '.join(names[:_SHOWN])} did not require grad when the wrapper{at} was built: DDP left them "
                "out of its all-reduce for good, and they train now.", built, "frozen_at_wrap")
    if uses and uses[-1][0] and uses[-1][1] is False:
        forward = source(wrapper, "no_sync_source")
        return (f"The last forward through the wrapper{at} before the optimizer step of step {step}"
                f"{f' (at {line_of(forward)})' if forward else ''} ran with require_backward_grad_sync=False "
                "(no_sync() in force): DDP prepared no all-reduce for its backward, and the step took each "
                "rank's own accumulated gradient.", forward or built, "no_sync")
    if kind == "grad" and any(row["grad_missing_steps"] for row in rows):
        flag = "" if wrapper["find_unused"] else " (find_unused_parameters=False)"
        return (f"Some ranks computed no gradient for them and others did: they were used on some ranks only, "
                f"and the wrapper{at}{flag} did not make every rank hold the average.", built, "used_on_some_ranks")
    if kind == "param" and step == rows[0]["first_compared"]:
        how = ("it was built with init_sync=False, so rank 0's weights were not broadcast: each rank kept its own "
               "initialisation (a rank-dependent seed)") if not wrapper["init_sync"] else \
            "it broadcast rank 0's weights, so they were initialised, loaded or changed on some ranks after it"
        return (f"They differ at the first step compared already: the ranks did not start from the same weights, "
                f"and nothing made them equal before training; the wrapper{at}: {how}.", built, "init_not_broadcast")
    rewrapped = [w for w in data["wrappers"] if w is not wrapper and w["module"] == wrapper["module"] is not None]
    if rewrapped:
        steps = sorted(w["built_step"] for w in data["wrappers"] if w["module"] == wrapper["module"]
                       and w["built_step"] is not None)
        return (f"The model is wrapped afresh (DDP wrappers built at steps {', '.join(map(str, steps))}): "
                "each new wrapper syncs what it is handed, and what a rank changed in between stays changed.",
                built, "wrapped_afresh")
    return (f"leaky saw no cause in how the wrapper{at} was driven: a difference in the optimizer's state, "
            "or an in-place write on one rank, can do it.", built, "unknown")
