"""LK308 cannot-overfit: one batch, repeated for K steps, is not driven down to its floor.

`leaky probe` feeds the first batch, and only it, for K steps, with the program's own
model, loss and optimizer. A wired model memorises one batch: with more parameters than
the batch has samples, some setting of them fits every sample (a last layer of width
d >= N over features that differ between samples can give any N outputs), and the loss
then falls to its floor (0 for hard targets; H(q) for a soft or label-smoothed q). What is
left of the reducible loss after K steps,

    remaining = (L_K - floor) / (L_0 - floor),

is ~0 for a wired model and stays near 1 when the gradient does not reach the weights
(a cut path, dead units, a dead zone) or the loss cannot express the target (a softmax
before cross_entropy caps every probability at e/(e + C - 1); a softplus or ReLU head
cannot reach negative targets). The audit of the program as it is (the probe's real-input
run, never the repeated batch's, whose oddities are the probe's doing) names which: its
findings are the evidence and give the place. Without one, no line is named.
"""
from __future__ import annotations

from leaky.checks import register
from leaky.checks._util import num, pct
from leaky.finding import Finding, Severity, Source
from leaky.probe.config import ProbeConfig
from leaky.probe.stats import AuditNote, OverfitStats

# The audit findings that explain a batch that cannot be memorised, the likeliest first.
_CAUSES = ("LK108", "LK106", "LK102", "LK301", "LK107", "LK101", "LK103", "LK201", "LK202", "LK105", "LK104",
           "LK302", "LK303", "LK304", "LK305", "LK203", "LK205")


@register("LK308", "cannot-overfit", "one batch repeated for K steps is not driven to a small fraction of its "
          "first loss (leaky probe)", probe=True)
def check(stats: OverfitStats, config: ProbeConfig) -> list[Finding]:
    remaining = stats.remaining
    if remaining is None or remaining <= config.overfit_fraction:
        return []
    cause = _cause(stats.audit)
    shown = "rose" if remaining > 1 else f"kept {pct(remaining)} of its reducible loss"
    message = (f"the first batch, repeated for {len(stats.losses)} steps, {shown}: its loss went from "
               f"{num(stats.first)} to {num(stats.last)} (floor {num(stats.floor)}: {stats.floor_what}); a wired "
               f"model keeps under {pct(config.overfit_fraction)}. Something between the data and the loss "
               f"is broken. {_why(cause, stats.audit)}")
    fix = (f"Fix what the audit found: {cause.fix}" if cause is not None and cause.fix else
           "Find what stops the gradient between the loss and the weights: a .detach(), .data or no_grad on "
           "the path, a clamp or round whose derivative is 0, dead ReLUs, an output layer that is frozen or "
           "has lr 0, a softmax or sigmoid the loss applies again, an output whose range cannot reach the "
           "targets. `leaky audit --steps all` names each; check that loss.backward() is called on the loss "
           "the model's output feeds.")
    evidence = {"first_loss": stats.first, "last_loss": stats.last, "loss_floor": stats.floor,
                "floor_what": stats.floor_what, "remaining": remaining, "max_remaining": config.overfit_fraction,
                "steps": len(stats.losses), "cause": None if cause is None else cause.code,
                "audit": [a.to_dict() for a in stats.audit]}
    # NOTE: without a cause there is no line to change: loss.backward() (where the probe sees
    # the loss) is not one, so the finding names none and says so.
    module = cause.module if cause is not None else None
    source = Source(*cause.source) if cause is not None and cause.source else None
    return [Finding("cannot-overfit", "LK308", Severity.ERROR, message, fix, module, None, source, None, evidence)]


def _cause(audit: tuple[AuditNote, ...]) -> AuditNote | None:
    serious = [a for a in audit if a.severity != "info"]
    ranked = sorted((a for a in serious if a.code in _CAUSES), key=lambda a: _CAUSES.index(a.code))
    return ranked[0] if ranked else None


def _why(cause: AuditNote | None, audit: tuple[AuditNote, ...]) -> str:
    """What the audit of the program as it is says about it: the cause, in its own words, and
    what else it found; or, plainly, that it found nothing that names a line."""
    serious = [a for a in audit if a.severity != "info" and a is not cause]
    others = "; ".join(f"{a.code} {a.name} at {a.where}" for a in serious[:3])
    more = f" and {len(serious) - 3} more" if len(serious) > 3 else ""
    if cause is None:
        also = f" (it shows {others}{more}, none of which stops a batch being learned)" if serious else ""
        return (f"The audit of the program as it is found nothing that explains it{also}, so leaky cannot "
                "tell which line to change.")
    said = f": {cause.message}" if cause.message else ""
    also = f" It also shows {others}{more}." if serious else ""
    return f"The audit of the program as it is shows the cause, {cause.code} {cause.name} at {cause.where}{said}{also}"
