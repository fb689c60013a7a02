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
before cross_entropy caps every probability at e/(e + C - 1)). The audit of those K steps
names which: its findings are the evidence and give the place.
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
    module = cause.module if cause is not None else None
    source = cause.source if cause is not None else stats.loss_site
    shown = "rose" if remaining > 1 else f"kept {pct(remaining)} of its reducible loss"
    message = (f"the first batch, repeated for {len(stats.losses)} steps, {shown}: its loss went from "
               f"{num(stats.first)} to {num(stats.last)} (floor {num(stats.floor)}: {stats.floor_what}); a wired "
               f"model keeps under {pct(config.overfit_fraction)}. Something between the data and the loss "
               f"is broken{_audit_text(stats.audit)}.")
    fix = ("Find what stops the gradient between the loss and the weights: a .detach(), .data or no_grad on "
           "the path, a clamp or round whose derivative is 0, dead ReLUs, an output layer that is frozen or "
           "has lr 0, a softmax or sigmoid the loss applies again. `leaky audit` names each; check that "
           "loss.backward() is called on the loss the model's output feeds.")
    evidence = {"first_loss": stats.first, "last_loss": stats.last, "loss_floor": stats.floor,
                "floor_what": stats.floor_what, "remaining": remaining, "max_remaining": config.overfit_fraction,
                "steps": len(stats.losses),
                "audit": [a.to_dict() for a in stats.audit]}
    return [Finding("cannot-overfit", "LK308", Severity.ERROR, message, fix, module,
                    None, Source(*source) if source else None, None, evidence)]


def _cause(audit: tuple[AuditNote, ...]) -> AuditNote | None:
    serious = [a for a in audit if a.severity != "info"]
    ranked = sorted((a for a in serious if a.code in _CAUSES), key=lambda a: _CAUSES.index(a.code))
    return ranked[0] if ranked else None


def _audit_text(audit: tuple[AuditNote, ...]) -> str:
    serious = [a for a in audit if a.severity != "info"]
    if not serious:
        return "; the audit of those steps found nothing more"
    shown = "; ".join(f"{a.code} {a.name} at {a.where}" for a in serious[:4])
    more = f" and {len(serious) - 4} more" if len(serious) > 4 else ""
    return f"; the audit of those steps shows {shown}{more}"
