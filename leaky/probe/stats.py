"""What each probe measured: immutable records, the input of the LK308 and LK309 checks.

Built by `leaky/probe/session.py` from the probe runs; the checks read them and compute
nothing but their verdict. `remaining` is the one derived number, kept here with its math.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


def slope(values) -> tuple[float, float] | None:
    """The slope b of the least-squares line through `values` (one per step) and its standard
    error s / sqrt(Σ(t - t̄)²), s the spread of the residuals; None for fewer than 4 values or
    a non-finite one."""
    n = len(values)
    if n < 4 or not all(math.isfinite(v) for v in values):
        return None
    t_mean, y_mean = (n - 1) / 2, sum(values) / n
    sxx = sum((t - t_mean) ** 2 for t in range(n))
    b = sum((t - t_mean) * (y - y_mean) for t, y in enumerate(values)) / sxx
    residual = sum((y - y_mean - b * (t - t_mean)) ** 2 for t, y in enumerate(values))
    return b, math.sqrt(residual / (n - 2) / sxx)


@dataclass(frozen=True)
class AuditNote:
    """One finding of a probe run's audit, as evidence: what it found and where."""

    code: str
    name: str
    severity: str
    where: str
    module: str | None = None
    source: tuple[str, int] | None = None
    message: str = ""
    fix: str = ""

    def to_dict(self) -> dict:
        """As the probes' evidence shows it (leaky/probe-v1)."""
        return {"code": self.code, "name": self.name, "severity": self.severity, "where": self.where,
                "module": self.module,
                "source": None if self.source is None else {"file": self.source[0], "line": self.source[1]}}


@dataclass(frozen=True)
class OverfitStats:
    """LK308: the losses of K steps on the first batch only."""

    losses: tuple[float, ...]             # the training loss at each step, the same batch every time
    steps: int                            # K asked for
    floor: float = 0.0                    # the least the loss can be on that batch (ops.losses.floor_of)
    floor_what: str = "0, a loss of unknown floor"
    tail: int = 5                         # L_K = mean of the last `tail` losses
    audit: tuple[AuditNote, ...] = ()     # the audit of the program as it is (its real-input run)
    loss_site: tuple[str, int] | None = None   # where loss.backward() was called
    recorded: int = 0                     # tensors of the first batch recorded (inputs and targets)
    # the floor of the mean of the `tail` losses ending at each step (1 .. K), when it changes
    # from step to step (mixup's weights drawn anew each step; probe/floor.py); () : `floor`
    floors: tuple[float, ...] = ()
    # False: the loss is not made of losses whose floor leaky knows (a policy-gradient
    # surrogate, an entropy bonus, a clipped value loss, a hand-written loss), and `floor` is 0
    # taken for it: what is left is measured against 0, which is no evidence of a stall
    floor_known: bool = True
    # floor.tied_floor: (floor, distinct outputs, rows) when the model gives several rows of
    # different targets one output at the last step (a bigram: one token of context), else None
    tied: tuple[float, int, int] | None = None
    lrs: tuple[float | None, ...] = ()    # the learning rate in force at each step (a scheduler's decay)

    @property
    def remaining_tied(self) -> float | None:
        """What is left against the floor of the rows the model gives one output (`tied`)."""
        return None if self.tied is None else self._left(self.last, len(self.losses), self.tied[0])

    @property
    def first_floor(self) -> float:
        """The floor of the first step's loss."""
        return self.floors[0] if self.floors else self.floor

    def _floor_at(self, step: int) -> float:
        """The floor of the mean loss of the `tail` steps ending at `step`."""
        return self.floors[step - 1] if self.floors and 0 < step <= len(self.floors) else self.floor

    @property
    def first(self) -> float | None:
        return self.losses[0] if self.losses else None

    @property
    def last(self) -> float | None:
        """The mean of the last `tail` losses (inf if any is not finite)."""
        values = self.losses[-self.tail:]
        if not values:
            return None
        if not all(math.isfinite(v) for v in values):
            return math.inf
        return sum(values) / len(values)

    @property
    def remaining(self) -> float | None:
        """What is left of the reducible loss: (L_K - floor_K) / (L_0 - floor_0), each
        against its own floor (the same one unless the loss's weights change per step).

        0 is a batch memorised down to the floor; 1 is no progress at all; above 1 it rose.
        None when the first loss is not finite or is at its floor (nothing to reduce)."""
        return self._left(self.last, len(self.losses))

    def at(self, step: int) -> float | None:
        """`remaining` at `step`: the mean of the `tail` losses before it, the same way."""
        values = self.losses[max(0, step - self.tail):step]
        if not values or not all(math.isfinite(v) for v in values):
            return None
        return self._left(sum(values) / len(values), step)

    def steps_to(self, target: float) -> float | None:
        """At the pace of the last quarter of the steps, how many more steps (in units of
        K) `remaining` needs to reach `target`: (r_K - target) / (r_3K/4 - r_K) * K/4 / K.
        inf when it did not fall over that quarter; 0 when it is already there."""
        now, before = self.remaining, self.at(3 * len(self.losses) // 4)
        if now is None or before is None:
            return None
        if now <= target:
            return 0.0
        fallen = before - now
        return math.inf if fallen <= 0 else (now - target) / fallen / 4

    @property
    def steady_pace(self) -> float | None:
        """Whether the loss is still falling steadily: over the last half of the steps it falls
        (its slope is below 0 by more than 2 standard errors) at least half as fast as over the
        first half. Then the pace it approaches its limit at is slower than e^(-K/2τ) = 1/2,
        τ > 0.72 K: what it tends to is not in sight after K steps, and a stall is not shown.
        Returns the ratio of the two paces when steady, else None. A model that stalls (a cut
        path: only a bias learns, and quickly) falls fast at first, then not at all. Each pace
        is per unit of the learning rate in force (`lrs`), when a scheduler moved it."""
        half = len(self.losses) // 2
        first, last = slope(self.losses[:half]), slope(self.losses[half:])
        if first is None or last is None or not last[0] < -2 * last[1] or first[0] >= 0:
            return None
        # NOTE: one step changes the loss by about lr times a gradient statistic: where a
        # scheduler lowered the rate in force (StepLR per epoch), each half's pace is per unit
        # of its mean rate, and a fall slowed only by the decay is still steady.
        ratio = last[0] / first[0] * self._rate_ratio(half)
        return ratio if ratio >= 0.5 else None

    def _rate_ratio(self, half: int) -> float:
        """The first half's mean learning rate over the last half's (1 when not known)."""
        rates = self.lrs[:len(self.losses)]
        if len(rates) != len(self.losses) or any(r is None or not r > 0 for r in rates):
            return 1.0
        return (sum(rates[:half]) / half) / (sum(rates[half:]) / (len(rates) - half))

    def _left(self, loss: float | None, step: int, floor: float | None = None) -> float | None:
        first, start = self.first, self.first_floor
        if first is None or loss is None or not math.isfinite(first) or first - start <= 0:
            return None
        return (loss - (self._floor_at(step) if floor is None else floor)) / (first - start)


@dataclass(frozen=True)
class ZeroedInputStats:
    """LK309: the held-out loss of K steps on the real inputs against the same with zeros."""

    real: float                           # score (mean held-out loss) with the real inputs
    zeroed: float                         # the same run, every model input replaced by zeros
    margin: float                         # the noise a difference must beat (leaky fix's)
    scores: tuple[float, ...] = ()        # the real-input scores: the user's seeds, then shifted
    held_out: bool = True                 # False: scored on the last training losses
    zeroed_kinds: tuple[str, ...] = ()    # what the zeros were ("integer (token ids) → 0")
    lost: dict | None = None              # InputTrace: the op that made the input constant
    reached: bool | None = None           # InputTrace: whether the model's output depends on its input
    forward: dict | None = None           # the model's forward definition
    audit: tuple[AuditNote, ...] = field(default_factory=tuple)   # the real-input run's audit
    # pairing.RowTrace: where the inputs and the targets stopped being the same samples
    # {"file", "line", "side", "other", "inputs", "targets", "met"}, or None
    mispaired: dict | None = None
    # origins.TargetOrigins: the first step's target computed from a model's output (a TD
    # target, a return, a sampled action), which the zeroed run changes too: {"file", "line",
    # "model", "called_at", "met"}, or None
    targets_from_model: dict | None = None
    losses: tuple[float, ...] = ()        # the real-input run's training losses, one per step
    tail: int = 5                         # its start is the mean of its first `tail` losses

    @property
    def gain(self) -> float:
        """How much lower the real inputs' loss is than the zeros' (negative: higher)."""
        return self.zeroed - self.real

    @property
    def start(self) -> float | None:
        """The real-input run's loss at its start: the mean of its first `tail` training losses."""
        values = [v for v in self.losses[:self.tail] if math.isfinite(v)]
        return sum(values) / len(values) if values else None

    @property
    def fallen(self) -> float | None:
        """How far the real inputs' loss fell in the K steps: its start less its score."""
        return None if self.start is None else self.start - self.real

    @property
    def still_falling(self) -> float:
        """How much lower K more steps would take the real inputs' loss, at the pace of the last
        half of its steps: -b·K, for b the slope of the least-squares line through those losses,
        when b < 0 by more than 2 standard errors (s / sqrt(Σ(t - t̄)²), s the residuals' spread);
        else 0. A loss still falling that fast has not shown what the input is worth."""
        fit = slope(self.losses[len(self.losses) // 2:])
        if fit is None:
            return 0.0
        b, error = fit
        return -b * len(self.losses) if b < -2 * error else 0.0
