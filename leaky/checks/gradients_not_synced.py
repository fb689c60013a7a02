"""LK402 gradients-not-synced: at an optimizer step under DDP, replica gradients differ across ranks.

A DDP wrapper all-reduces the gradients of the parameters it syncs during the backward of
each forward it ran with `require_backward_grad_sync` set: every rank then holds the same
bytes of g = (1/R)·Σ_r g_r. leaky compares, on each sampled step, the L2 norm of every
replica gradient over the ranks (derive/fields/replicas.py); a relative spread above
`replica_tolerance`, or a gradient present on some ranks and None on others, means the step
was taken on per-rank gradients. The cause the run shows is named: no_sync() still in force
at the last micro-step, a backward through the unwrapped module, a parameter used on some
ranks only, parameters replaced or unfrozen after wrapping.
"""
from __future__ import annotations

from leaky.checks import register
from leaky.checks._replicas import cause, differing, named, ranks_apart, replicas
from leaky.checks.replicas_diverged import _FIXES
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats


@register("LK402", "gradients-not-synced", "gradients under DDP differ across ranks at the optimizer step")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    data = replicas(stats)
    rows = differing(data, "grad")
    if not rows:
        return []
    step = rows[0]["grad_first_step"]
    first = [row for row in rows if row["grad_first_step"] == step]
    why, source, kind = cause(data, first, step, "grad")
    message = (f"at the optimizer step of step {step}, the gradients of {len(rows)} of {len(data['params'])} replica "
               f"parameters differ across ranks (first: {named(first, 'grad')}{_apart(first[0])}). DDP gives every rank the same "
               f"all-reduced average, so each rank stepped on its own gradient instead. {why}")
    return [Finding("gradients-not-synced", "LK402", Severity.ERROR, message, _FIXES[kind],
                    first[0]["module"] or None, None, source, step,
                    {"params": [row["name"] for row in rows], "first_step": step, "cause": kind,
                     "largest_spread": max(row["grad_spread"] for row in rows), "compared": len(data["params"]),
                     "ranks": first[0].get("grad_ranks")})]


def _apart(row: dict) -> str:
    text = ranks_apart(row, "grad")
    return f"; {text}" if text else ""
