"""LK107 non-finite: the first op, forward or backward, that produced NaN or Inf.

leaky flags every op's output (forward) and every node's outgoing gradient norm (backward)
on the device and reads the flags once per step, so the origin is found in the same pass,
without detect_anomaly's second pass. Backward traps are ops whose local derivative is
infinite where their forward value is finite or masked:

    d/dx log(x) = 1/x        -> inf at 0; where(x > 0, log(x), 0) still computes it
    d/dx sqrt(x) = 1/(2√x)   -> inf at 0
    0 · inf = NaN            -> a masked branch does not protect the backward pass
"""
from __future__ import annotations

import math
from dataclasses import replace

from leaky import ops
from leaky.checks import register
from leaky.checks._util import line_of
from leaky.config import AuditConfig
from leaky.finding import Cause, Finding, Severity, Source
from leaky.stats import AuditStats, NonFinite

_GENERIC = ("an op produced a non-finite value", "Check this op's inputs for extreme values; lower "
            "the learning rate or clip gradients if the values grew over training.")


@register("LK107", "non-finite", "the first op, forward or backward, that produced NaN/Inf")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    events = {event.phase: event for event in stats.nonfinite}
    backward, forward = events.get("backward"), events.get("forward")
    loss_bad = any(not math.isfinite(loss) for loss in stats.losses)
    if forward is not None and backward is None and not loss_bad:
        forward = None   # e.g. an -inf that a later op masked: it never reached the loss
    if backward is not None and stats.loss_scaler is not None and not loss_bad and forward is None:
        backward = None  # a GradScaler's overflow step: the scaler skips it and lowers the scale
    ordered = sorted((e for e in (forward, backward) if e is not None),
                     key=lambda e: (e.step, e.phase == "backward"))
    if not ordered:
        return []
    # NOTE: only the earliest event is the origin; a later one elsewhere (a weight gradient
    # that picked up the NaN the forward pass already made) is its consequence.
    first = ordered[0]
    other = ordered[1] if len(ordered) > 1 else None
    same_place = other is not None and _place(other) == _place(first)
    then = None
    if other is not None and not same_place:
        then = {"phase": other.phase, "op": other.op.op, "module": other.op.module, "step": other.step}
    masked = _masked_whole(stats, first)
    finding = _finding(first, other if same_place else None, then)
    return [finding if masked is None else _masked_row(finding, first, masked)]


def _masked_whole(stats: AuditStats, event: NonFinite):
    """The masked_fill site that filled a softmax's scores with -inf, when that softmax made
    the first non-finite forward value.

    NOTE: a certainty, not a guess. softmax(x) = exp(x - max x) / Σ exp(x - max x): with one
    finite entry in a row, max x is finite and every exp is in [0, 1] with a 1 among them,
    so the row is finite. A non-finite input other than the fill would have been flagged at
    the op that made it, first. So the softmax's NaN comes from a row filled whole: every
    entry masked, max x = -inf, and exp(-inf - (-inf)) = exp(NaN)."""
    filled = event.op.detail.get("filled_by")
    if event.phase != "forward" or filled is None:
        return None
    fill = next((op for op in stats.ops if op.site == filled), None)
    if fill is None or fill.detail.get("fill") != "-inf":
        return None
    return fill


def _masked_row(finding: Finding, event: NonFinite, fill) -> Finding:
    """LK107 at a softmax whose scores a mask filled with -inf: the row masked whole is the
    origin, and the line to change is the one that made the mask."""
    mask_at = fill.detail.get("mask_at")
    made = f"; the mask was made at {line_of(Source(*mask_at))}" if mask_at else ""
    message = (f"{event.op.op} produced the first non-finite forward value at step {event.step}: a row of its input "
               f"is -inf in every entry. {fill.op} at {line_of(fill.source)} filled the masked scores with -inf"
               f"{made}, and it masks every entry of at least one row (a query that may attend to no key): "
               "softmax of an all -inf row is exp(-inf - max) / Σ = 0/0 = NaN, in the forward and the backward.")
    fix = ("Make the mask leave at least one entry of every row: check its polarity (True where to hide), let "
           "padded queries attend to themselves (or drop their rows after the softmax), or fill with a large finite "
           "value (torch.finfo(scores.dtype).min) instead of -inf.")
    cause = Cause(mask_at[0], mask_at[1], "the mask made here hides whole rows") if mask_at \
        else Cause.at(fill.source, "the mask applied here hides whole rows")
    evidence = {**finding.evidence, "masked_row": True, "filled_at": fill.source.line if fill.source else None}
    return replace(finding, message=message, fix=fix, cause=cause, evidence=evidence)


def _place(event: NonFinite):
    return event.op.module, event.op.source


def _finding(event: NonFinite, twin: NonFinite | None, then: dict | None = None) -> Finding:
    op = event.op
    math_line, fix = _explain(op)
    value = event.value if event.value in ("nan", "inf") else "NaN/Inf"
    phase = event.phase
    if phase == "backward":
        message = (f"the backward pass of {op.op} ({op.node}) turned a finite incoming gradient into "
                   f"{value} at step {event.step}: {math_line}.")
    else:
        message = f"{op.op} produced the first non-finite forward value at step {event.step}: {math_line}."
    if twin is not None:
        other = "forward output" if twin.phase == "forward" else "backward pass"
        message += f" Its {other} was non-finite too (step {twin.step})."
    if event.rank is not None:
        message += f" It happened on rank {event.rank}'s data; the other ranks got it through DDP's all-reduce."
    evidence = {"phase": phase, "node": op.node, "value": value, "step": event.step, "rank": event.rank,
                "then": then}
    return Finding("non-finite", "LK107", Severity.ERROR, message, fix, op.module, op.op, op.source,
                   event.step, evidence)


def _explain(op) -> tuple[str, str]:
    """The op's backward trap, from its rule (ops: log, sqrt, div, pow, exp), else the generic text.
    A log of a softmax is the log-softmax underflow (the log rule's `of_normaliser`)."""
    rule = ops.rule(op.op.rstrip("_"))
    if rule is None:
        return _GENERIC
    feeding = ops.node_rule(str(op.detail.get("input_node", "")))
    if rule.extra.get("of_normaliser") and feeding is not None and feeding.activation is not None and feeding.activation.rows:
        return rule.extra["of_normaliser"]
    return rule.trap or _GENERIC
