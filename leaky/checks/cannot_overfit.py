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

The floor must be known: a loss made of losses whose floor leaky knows (`ops.losses.FLOORS`,
weighted). A policy-gradient surrogate, an entropy bonus or a clipped value loss (PPO's trust
region stops each by design at a value of its own), or any hand-written loss, has a floor
leaky does not know; measured against 0, what is left of it is no evidence of a stall, and it
is never failed (`leaky probe` says it could not decide).

When the audit shows nothing that stops it, two more are not failed:

- a model that gives several rows of different targets one output (`OverfitStats.tied`): a
  bigram table sees one token, so on a batch of words its floor is the entropy of the next
  token given the current (1.49 nats on a batch of 32 words where 0 is assumed: 46% "left"
  against 0, 2.3% against its own floor), and exact duplicates with different labels have
  one too (`floor.tied_floor`). Judged against that floor it is not a stall, but leaky
  cannot tell a model that sees part of its input by design from a fault that merges inputs;
- a loss still falling steadily (`OverfitStats.steady_pace`): a small learning rate moves
  every weight a little each step (Adam by about lr: a bigram table at lr 5e-4 moves each
  logit 0.05 in 100 steps), so the batch is not memorised in K steps, but nothing is stuck.
  A stall falls fast at first (the part that still trains, a bias, converges), then not at all.
"""
from __future__ import annotations

from leaky.checks import explained_by, register
from leaky.checks._util import listed, num, pct
from leaky.finding import Finding, Severity, Source
from leaky.probe.config import ProbeConfig
from leaky.probe.stats import AuditNote, OverfitStats

# The audit findings that explain a batch that cannot be memorised, the likeliest first.
@register("LK308", "cannot-overfit", "one batch repeated for K steps is not driven to a small fraction of its "
          "first loss (leaky probe)", probe=True,
          explained_by=("LK108", "LK106", "LK102", "LK301", "LK107", "LK101", "LK103", "LK201", "LK202", "LK105",
                        "LK104", "LK302", "LK303", "LK304", "LK305", "LK203", "LK205"))
def check(stats: OverfitStats, config: ProbeConfig) -> list[Finding]:
    remaining = stats.remaining
    if remaining is None or remaining <= config.overfit_fraction or undecided(stats, config) is not None:
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


def undecided(stats: OverfitStats, config: ProbeConfig) -> str | None:
    """Why a batch that kept more than the threshold is no evidence of harm here, or None
    (see the module doc). Said by `leaky probe` as the reason it could not decide."""
    remaining = stats.remaining
    if remaining is None or remaining <= config.overfit_fraction:
        return None
    left = f"{pct(remaining)} of the loss is left after {len(stats.losses)} steps"
    if not stats.floor_known:
        return (f"{left} measured against 0, but the loss is not made of losses whose floor leaky knows (a "
                "policy-gradient surrogate, an entropy bonus, a clipped or hand-written loss): its least value on "
                "this batch is unknown, and may be far from 0")
    if _cause(stats.audit) is not None:
        return None
    tied = stats.remaining_tied
    if tied is not None and tied <= config.overfit_fraction:
        floor, distinct, rows = stats.tied
        return (f"{left}, but the model gives one output to rows with different targets ({distinct} distinct "
                f"outputs for {rows} rows: it sees part of each input, as a bigram sees one token, or samples repeat "
                f"with other labels), and no model that does can go below {num(floor)} on this batch: {pct(tied)} "
                "is left above that, and the audit shows nothing that stops it")
    pace = stats.steady_pace
    if pace is not None:
        return (f"{left}, but it is still falling steadily (over the last {len(stats.losses) - len(stats.losses) // 2} "
                f"steps at {pct(pace)} of its pace over the first) and the audit shows nothing that stops it: too "
                "slow to memorise one batch in this many steps, not stuck; run with a larger --steps")
    return None


def _cause(audit: tuple[AuditNote, ...]) -> AuditNote | None:
    serious = [a for a in audit if a.severity != "info"]
    order = explained_by("LK308")
    ranked = sorted((a for a in serious if a.code in order), key=lambda a: order.index(a.code))
    return ranked[0] if ranked else None


def _why(cause: AuditNote | None, audit: tuple[AuditNote, ...]) -> str:
    """What the audit of the program as it is says about it: the cause, in its own words, and
    what else it found; or, plainly, that it found nothing that names a line."""
    serious = [a for a in audit if a.severity != "info" and a is not cause]
    others = listed((f"{a.code} {a.name} at {a.where}" for a in serious), 3, sep="; ")
    if cause is None:
        also = f" (it shows {others}, none of which stops a batch being learned)" if serious else ""
        return (f"The audit of the program as it is found nothing that explains it{also}, so leaky cannot "
                "tell which line to change.")
    said = f": {cause.message}" if cause.message else ""
    also = f" It also shows {others}." if serious else ""
    return f"The audit of the program as it is shows the cause, {cause.code} {cause.name} at {cause.where}{said}{also}"
