"""Helps, no effect or hurts: a fixed run against the unfixed one, beyond run-to-run noise.

The score of a run is its mean loss on the held-out batches (see `trial`). The noise is
the spread (max - min) of the scores of the unfixed program run with its seeds shifted
(+1, +2, ...: other initial weights, and another data order wherever the data order
comes from a seeded generator; runs that diverged are left out), never less than `floor` of
the unfixed score. A fix helps when its score is below the unfixed score by more than
that margin, and hurts when above it by more. A non-finite score (a NaN or Inf loss) is worse than any finite one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

HELPS, NO_EFFECT, HURTS, NOT_JUDGED = "helps", "no effect", "hurts", "not judged"
RELATIVE_FLOOR = 0.01   # differences under 1% of the loss are never called an effect
NOISE_HOW = ("the unfixed program re-run with every seed it sets (torch.manual_seed, random.seed, "
             "numpy.random.seed) shifted by +1, +2, ...; margin = max(spread of the scores, 1% of the score)")


@dataclass(frozen=True)
class Noise:
    scores: tuple[float, ...]     # unfixed scores: the user's seeds first, then the shifted ones
    margin: float                 # the difference a fix must beat

    @property
    def diverged(self) -> int:
        """Unfixed runs whose score is not finite (they are worse than any finite run)."""
        return sum(1 for s in self.scores if not math.isfinite(s))

    def to_dict(self) -> dict:
        return {"scores": list(self.scores), "margin": self.margin, "how": NOISE_HOW}


def noise(scores: list[float | None], floor: float = RELATIVE_FLOOR) -> Noise:
    """The margin: the spread of the finite unfixed scores, at least `floor` of the first
    (a run with no score, no step made, counts as diverged: inf).

    NOTE: an unfixed run that diverges (NaN/Inf) only says the program is unstable; it is
    worse than any finite run, so it is left out of the spread instead of making it infinite.
    """
    scores = [s if s is not None else math.inf for s in scores]
    finite = [s for s in scores if math.isfinite(s)]
    spread = max(finite) - min(finite) if finite else 0.0
    base = abs(scores[0]) if scores and math.isfinite(scores[0]) else 0.0
    return Noise(tuple(scores), max(spread, floor * base))


def judge(unfixed: float | None, fixed: float | None, margin: float) -> str:
    if unfixed is None or fixed is None:
        return NOT_JUDGED
    if not math.isfinite(unfixed) and not math.isfinite(fixed):
        return NO_EFFECT
    if not math.isfinite(unfixed):
        return HELPS
    if not math.isfinite(fixed):
        return HURTS
    if fixed < unfixed - margin:
        return HELPS
    if fixed > unfixed + margin:
        return HURTS
    return NO_EFFECT
