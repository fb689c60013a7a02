"""LK401 replicas-diverged: parameters that data parallelism keeps identical differ across ranks.

DDP keeps one copy of the model per rank. In backward it all-reduces every gradient, and
every rank receives the same bytes of the average g = (1/R)·Σ_r g_r; the optimizer then
applies the same update to the same weights, so w_{t+1} = w_t - lr·g is bitwise equal on
every rank. leaky compares, on each sampled step, the L2 norm of every replica
parameter over the ranks (derive/fields/replicas.py): a relative spread (max - min)/max
above `replica_tolerance` (the float64 rounding of the norm itself) means the ranks now
train different models. The cause the run shows is named with its line: a forward that
bypasses the wrapper, parameters replaced or unfrozen after wrapping, no_sync() at the
last micro-step, weights that differ at the first step (a rank-dependent init never
broadcast), a model wrapped afresh.
"""
from __future__ import annotations

from leaky.checks import note, register
from leaky.checks._replicas import cause, differing, named, ranks_apart, replicas
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats


@register("LK401", "replicas-diverged", "parameters DDP keeps identical differ across ranks")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    data = replicas(stats)
    rows = differing(data, "param")
    if not rows:
        return []
    step = rows[0]["param_first_step"]
    first = [row for row in rows if row["param_first_step"] == step]
    why, source, kind = cause(data, first, step, "param")
    grads = " Their gradients differ across ranks too (LK402)." if any(
        row["grad_first_step"] is not None for row in first) else ""
    message = (f"from step {step} on, {len(rows)} of {len(data['params'])} replica parameters differ across ranks "
               f"(first: {named(first, 'param')}{_apart(first[0])}). DDP keeps every rank's copy bitwise equal, so the ranks now "
               f"train different models. {why}{grads}")
    fix = _FIXES[kind]
    return [Finding("replicas-diverged", "LK401", Severity.ERROR, message, fix, first[0]["module"] or None, None,
                    source, step, {"params": [row["name"] for row in rows], "first_step": step, "cause": kind,
                                   "largest_spread": max(row["param_spread"] for row in rows),
                                   "compared": len(data["params"]), "ranks": first[0].get("param_ranks")})]


@note("LK401")
def uncompared(stats: AuditStats, config: AuditConfig) -> list[str]:
    """Sampled steps on which the ranks' DDP wrappers held different parameters: nothing compared."""
    steps = replicas(stats).get("uncompared_steps", 0)
    if not steps:
        return []
    return [f"On {steps} sampled step{'s' if steps > 1 else ''} the ranks' DDP wrappers did not hold the same "
            "parameters (a wrapper or a parameter on some ranks only), so their replicas were not compared there "
            "(LK401, LK402)."]


_FIXES = {
    "bypassed": "Call the DDP wrapper, not the module inside it, for every training forward "
                "(loss = ddp(x), not model(x)); keep model/ddp.module for evaluation under torch.no_grad().",
    "replaced": "Replace or add parameters before wrapping the model in DistributedDataParallel, "
                "or build a new wrapper (and optimizer) after the change.",
    "frozen_at_wrap": "Set requires_grad before wrapping in DistributedDataParallel, or build a new wrapper "
                      "after unfreezing.",
    "no_sync": "Leave no_sync() for the last micro-step of each accumulation: run its forward and backward "
               "outside the context, so DDP all-reduces the accumulated gradient before opt.step().",
    "init_not_broadcast": "Give every rank the same weights before the wrapper is built (the same seed, a checkpoint "
                          "loaded on every rank) and let DDP broadcast rank 0's when it is built (init_sync=True, "
                          "the default); load or change weights before wrapping, not after.",
    "wrapped_afresh": "Wrap the model once, before training, and keep that wrapper for every epoch.",
    "used_on_some_ranks": "Use every parameter on every rank, or build DDP with find_unused_parameters=True.",
    "unknown": "Compare the ranks' weights (torch.distributed.all_gather of a parameter's norm) step by step "
               "to find the first update that differs.",
}


def _apart(row: dict) -> str:
    text = ranks_apart(row, "param")
    return f"; {text}" if text else ""
