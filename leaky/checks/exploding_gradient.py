"""LK104 exploding-gradient: the gradient grows by orders of magnitude, spikes, or overflows.

The same product of local Jacobians that can vanish can grow: weights whose scale gives a
layer gain > 1 multiply the gradient by that gain at every layer. leaky flags (a) growth
from the latest to the earliest parameterised module, located at the ops with the largest
gains, (b) a step whose total gradient norm jumps over `spike_factor` times the median of
the earlier steps, and (c) a total gradient norm that overflowed to inf.
"""
from __future__ import annotations

import heapq
import math

from leaky.checks import register
from leaky.checks._depth import depth_profile, describe, worst_ops
from leaky.checks._util import num, severity_above
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats

_FIX = ("Scale the initial weights to fan-in (nn.init.kaiming_normal_ / xavier_uniform_), add "
        "normalisation, lower the learning rate, and clip with "
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) between backward() and step().")


@register("LK104", "exploding-gradient", "the gradient norm grows by orders of magnitude, or spikes over steps")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    return [f for f in (_depth(stats, config), _spike(stats, config), _overflow(stats)) if f is not None]


def _depth(stats: AuditStats, config: AuditConfig) -> Finding | None:
    profile = depth_profile(stats)
    if profile is None:
        return None
    severity = severity_above(profile.ratio, config.exploding_warning, config.exploding_error)
    if severity is None:
        return None
    culprits = worst_ops(profile.path, shrinking=False, config=config)
    orders = math.log10(profile.ratio)
    first, last = profile.earliest, profile.latest
    grown = "; ".join(describe(op) for op in culprits) or "spread over many ops"
    message = (f"the gradient entering {first.module} is {num(profile.ratio)}× the one entering "
               f"{last.module} ({orders:.1f} orders of magnitude gained over {profile.modules} "
               f"parameterised modules). Largest gains: {grown}.")
    top = culprits[0] if culprits else first
    evidence = {"ratio": profile.ratio, "orders_of_magnitude": orders, "earliest_module": first.module,
                "earliest_grad_norm": first.grad_in, "latest_module": last.module,
                "latest_grad_norm": last.grad_in,
                "amplifying_ops": [{"op": op.op, "module": op.module,
                                    "line": op.source.line if op.source else None, "gain": op.gain}
                                   for op in culprits]}
    return Finding("exploding-gradient", "LK104", severity, message, _FIX, top.module, top.op, top.source,
                   None, evidence)


def _norm_series(stats: AuditStats) -> list[tuple[int, float]]:
    """(optimizer step, total gradient norm) of every step with one. NOTE: the step, never
    the position in this list: steps without a norm are left out, and a long run keeps
    only its last steps in memory."""
    return [(row.step, row.grad_norm) for row in stats.series if row.grad_norm is not None]


def _per_term(stats: AuditStats) -> tuple[list[tuple[int, float]], int, int] | None:
    """The norms divided by the number of terms their step's loss summed, with the fewest and
    the most, when every step's loss is a sum whose number of terms varies (an episode per
    step): the gradient of a sum of n terms grows with n, up to n times one term's. Else None."""
    rows = [row for row in stats.series if row.grad_norm is not None]
    terms = [row.terms for row in rows]
    if not rows or None in terms or min(terms) == max(terms) or min(terms) <= 0:
        return None
    return [(row.step, row.grad_norm / row.terms) for row in rows], min(terms), max(terms)


def _spike(stats: AuditStats, config: AuditConfig) -> Finding | None:
    """The first step whose norm is over spike_factor times the median of the finite norms
    before it (at least spike_min_history of them); per summed term when the loss sums a
    number of terms that varies by step (`_per_term`).

    NOTE: the median of the earlier steps is kept as two heaps (the lower half, the upper
    half) as the steps are walked: O(n log n) a pass. A list and `statistics.median` per step
    were O(n² log n): a watch runs this pass every 100 steps, and past ~5000 steps one pass
    took seconds (the same medians, bit for bit: tests/e2e/test_properties.py)."""
    lower: list[float] = []   # the smaller half, negated (heapq is a min-heap)
    upper: list[float] = []
    summed = _per_term(stats)
    series, per = (_norm_series(stats), "") if summed is None else \
        (summed[0], f" per summed term (its loss adds up {summed[1]} to {summed[2]} terms, a different number at each step)")
    for index, (step, norm) in enumerate(series):
        finite = math.isfinite(norm)
        if index >= config.spike_min_history and finite and len(lower) + len(upper) >= config.spike_min_history:
            median = -lower[0] if len(lower) > len(upper) else (-lower[0] + upper[0]) / 2
            if median > 0 and norm > config.spike_factor * median:
                message = (f"at step {step} the total gradient norm{per} is {num(norm)}, "
                           f"{num(norm / median)}× the median {num(median)} of the steps before it.")
                return Finding("exploding-gradient", "LK104", Severity.WARNING, message, _FIX, None, None, None,
                               step, {"grad_norm": norm, "median_before": median})
        if finite:
            heapq.heappush(upper, -heapq.heappushpop(lower, -norm))
            if len(upper) > len(lower):
                heapq.heappush(lower, -heapq.heappop(upper))
    return None


def _overflow(stats: AuditStats) -> Finding | None:
    for step, norm in _norm_series(stats):
        if math.isinf(norm):
            message = f"at step {step} the total gradient norm overflowed to inf."
            return Finding("exploding-gradient", "LK104", Severity.ERROR, message, _FIX, None, None, None,
                           step, {"grad_norm": "inf"})
    return None
