"""LK106 dead-zone: an op whose local derivative is exactly 0 on many elements.

    d/dx clamp(x, lo, hi) = 1 if lo <= x <= hi else 0
    d/dx round(x) = d/dx floor(x) = d/dx sign(x) = 0   (almost everywhere)
    d/dx hardtanh(x) = 1 if lo < x < hi else 0
    softmax over a size-1 dim is constant 1: its Jacobian diag(s) - s s^T = 0

The share is measured on the gradient itself: of the elements whose arriving gradient is
nonzero, how many leave this op with a gradient of exactly 0. Elements that were already
zero upstream (a masked attention score, say) do not count. ReLU sparsity is LK102's
business, not this check's.

The share is summed over every observed step (the whole window), so a dead zone that
shrinks as training goes on is judged on all it dropped, not on its last step.

Its threshold depends on its role. In a hidden layer the next matrix product spreads each
output's gradient over every unit: a zeroed element is one path among many
(dead_zone_warning). On the loss path (no layer between the op and the loss: a clamped TD
error, a clamped prediction) each element is one output of one sample, whose gradient has
no other way back: a zeroed share s drops s of the outputs from the update
(dead_zone_loss_warning). A selection there (where, masked_fill) is a mask, by design: it
keeps the hidden threshold.

On the loss path a clamp or step is also weighed by the gradient it zeroes: of the mass
Σ|g| arriving, the share sent on as 0 (dead_zone_mass_warning). Few elements can carry most
of it: `binary_cross_entropy(x.clamp(0, 1), y)` gives d/dp = (p − y) / max(p(1 − p), eps),
near 1/eps at p = 0 with y = 1, so the 1.5% of outputs clamped on the wrong side hold nearly
all of the gradient, and the clamp drops it: those samples never move back inside.

A clamp that an elementwise max/min sets against its own unclipped value (its detail's
`clipped_by`, record/clipping.py) is a pessimistic bound, PPO's trust region:
max(−A·r, −A·clamp(r, 1 − ε, 1 + ε)) has d/dr = 0 exactly where the clipped branch is the
larger loss and the clamp binds, by design. Its share is reported as info, never more.
"""
from __future__ import annotations

from dataclasses import replace

from leaky import ops
from leaky.checks import headline, register
from leaky.checks._util import line_of, pct, severity_above
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.ops.activations import BOUNDED, SOFTMAX_OF_ONE
from leaky.ops.dead_zones import SELECT
from leaky.stats import AuditStats, OpStats


@register("LK106", "dead-zone", "an op whose local derivative is exactly 0 on a large share of elements")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    shares = judged_shares(stats)
    by_site = {op.site: op for op in stats.ops}
    findings = []
    for op in stats.ops:
        share = shares.get(op.site)
        if share is None:
            continue
        kind = ops.rule(op.op).zero
        on_loss_path = op.loss_path and kind is not SELECT
        judged_by = "elements"      # the measure the severity rests on (`leaky fix` shows it before and after)
        if on_loss_path:
            by_count = severity_above(share, config.dead_zone_loss_warning, config.dead_zone_loss_error)
            by_mass = _by_mass(op, config)
            severity = _worst(by_count, by_mass)
            if by_mass is not None and (by_count is None or by_mass.rank > by_count.rank):
                judged_by = "gradient mass"
        else:
            severity = severity_above(share, config.dead_zone_warning, config.dead_zone_error)
        if severity is None:
            continue
        finding = _finding(op, kind, share, severity, on_loss_path, judged_by)
        chooser = by_site.get(op.detail.get("clipped_by"))
        findings.append(finding if chooser is None else _by_design(finding, op, chooser, share))
    return findings


def _by_design(finding: Finding, op: OpStats, chooser: OpStats, share: float) -> Finding:
    """A clamp that a max/min sets against its own unclipped value (record/clipping.py): PPO's
    pessimistic bound, whose zeros are the samples the trust region stops. Info, never a leak."""
    message = (f"{op.op} is set against its own unclipped value by {chooser.op} at {line_of(chooser.source)}: a "
               "pessimistic bound (PPO-style clipping, a trust region), which takes per sample the worse of the "
               "clipped and the unclipped loss. Where the clamp binds and its branch is chosen, the gradient is 0 by "
               f"design: the sample has moved as far as the clip lets it. Here it stopped {pct(share)} of the "
               f"{int(op.nonzero_in)} elements' gradient, summed over {_window(op)}.{_bounds(op)}")
    fix = ("Nothing to fix if the clip is meant. A share this large says that each update moves the model far "
           "from the one that collected the data: if learning is slow, widen the clip range or take fewer or "
           "smaller steps per batch (epochs, learning rate).")
    evidence = {**finding.evidence, "by_design": "pessimistic-clip", "clipped_at": line_of(chooser.source)}
    return replace(finding, severity=Severity.INFO, message=message, fix=fix, evidence=evidence)


def _by_mass(op: OpStats, config: AuditConfig) -> Severity | None:
    mass = op.zeroed_mass_share
    return None if mass is None else severity_above(mass, config.dead_zone_mass_warning, config.dead_zone_mass_error)


def _worst(a: Severity | None, b: Severity | None) -> Severity | None:
    found = [s for s in (a, b) if s is not None]
    return max(found, key=lambda s: s.rank) if found else None


def judged_shares(stats: AuditStats) -> dict[int, float]:
    """Site -> the element share LK106 judges the op there by (`leaky fix` shows it before and
    after): of the elements reaching it with a gradient, those it sends on as 0; for a bounded
    activation (hardtanh, relu6), the unit-samples at a bound in the forward pass. Ops it does
    not judge are left out."""
    flat = {act.site: act.flat_share for act in stats.activations}
    shares = {}
    for op in stats.ops:
        rule = ops.rule(op.op)
        kind = None if rule is None else rule.zero
        if kind is None or op.steps == 0:
            continue
        share = _share(op, kind, flat)
        if share is not None:
            shares[op.site] = share
    return shares


def _share(op: OpStats, kind: ops.Zone, flat: dict[int, float | None]) -> float | None:
    if kind is SOFTMAX_OF_ONE and op.detail.get("dim_size") != 1:
        return None   # an ordinary softmax: zeros come from probabilities that are already 0
    if kind is BOUNDED:
        return flat.get(op.site)   # upper/lower bound share from the forward pass
    if ops.only_moves(op.node):
        return None   # the op became a copy or a view (its bounds let every value through)
    return op.zeroed_share


def _window(op: OpStats) -> str:
    """The observed steps the share is summed over."""
    counted = op.zero_steps or op.steps
    if counted >= op.steps:
        return f"all {op.steps} observed steps" if op.steps > 1 else "the observed step"
    return f"the {counted} of its {op.steps} observed steps whose zeros were counted"


def _bounds(op: OpStats) -> str:
    low, high = op.detail.get("low"), op.detail.get("high")
    if low is None and high is None:
        return ""
    return f" Bounds here: [{'-inf' if low is None else low}, {'inf' if high is None else high}]."


def _finding(op: OpStats, kind: ops.Zone, share: float, severity, on_loss_path: bool, judged_by: str) -> Finding:
    bounds = _bounds(op)
    elements = int(op.nonzero_in)
    counted = f" of the {elements} elements that reach the loss" if elements else " of the elements that reach the loss"
    message = (f"{op.op} sets the gradient of {pct(share)}{counted} to exactly 0, summed over "
               f"{_window(op)}: {kind.derivative}.{bounds} ")
    if on_loss_path:
        message += ("It sits between the model's output and the loss, with no layer in between: each of these "
                    "elements is one output of one sample, and its whole learning signal is dropped.")
        mass = op.zeroed_mass_share
        if mass is not None and mass > share:
            message += (f" By gradient mass it drops {pct(mass)} of the signal arriving (Σ|g| over the same steps): "
                        "the few elements past its bounds carry the largest gradients, the ones that would bring them back "
                        "inside.")
    else:
        message += "Nothing upstream of these elements learns from them."
    evidence = {"zeroed_share": share, "elements_reaching_loss": elements, "node": op.node,
                "steps_counted": op.zero_steps or op.steps, "role": "loss_path" if on_loss_path else "hidden",
                "zeroed_mass_share": op.zeroed_mass_share, "judged_by": judged_by,
                **op.detail}
    return Finding("dead-zone", "LK106", severity, message, kind.fix, op.module, op.op, op.source, None,
                   evidence)


@headline("LK106", "gradient elements zeroed")
def _headline(finding: Finding, stats: AuditStats):
    """The share the finding was judged by (its evidence's `judged_by`): of the elements, as
    LK106 reads it (a bounded activation's share at a bound, dead_zone.judged_shares), or of
    the gradient's mass Σ|g| arriving (a clamp on the loss path that zeroes few elements
    carrying most of the gradient)."""
    if finding.source is None:
        return None
    by_mass = finding.evidence.get("judged_by") == "gradient mass"
    at_line = [op for op in stats.ops if op.source is not None
               and (op.source.file, op.source.line) == (finding.source.file, finding.source.line)]
    judged = {} if by_mass else judged_shares(stats)
    shares = [s for op in at_line if (s := op.zeroed_mass_share if by_mass else judged.get(op.site)) is not None]
    value = pct(max(shares)) if shares else pct(0.0)
    return ("gradient mass zeroed", value) if by_mass else value
