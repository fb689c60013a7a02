"""The loss curve's shape, shared by LK204 and LK205: start and end levels, robust to
minibatch noise (the means of the first and last tenth of the observed steps)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from leaky.finding import Finding
from leaky.stats import AuditStats


@dataclass(frozen=True)
class LossCurve:
    steps: int
    start: float        # mean of the first tenth (>= 3 steps)
    end: float          # mean of the last tenth
    first_step: int
    last_step: int
    nonfinite_step: int | None


def loss_curve(stats: AuditStats, min_steps: int) -> LossCurve | None:
    rows = [(step, loss) for step, loss, _, _ in stats.series if loss is not None]
    bad = next((step for step, loss in rows if not math.isfinite(loss)), None)
    finite = [(step, loss) for step, loss in rows if math.isfinite(loss)]
    if len(finite) < min_steps and bad is None:
        return None
    if len(finite) < 6:
        return LossCurve(len(rows), math.nan, math.nan, rows[0][0] if rows else 0,
                         rows[-1][0] if rows else 0, bad)
    tenth = max(3, len(finite) // 10)
    start = sum(loss for _, loss in finite[:tenth]) / tenth
    end = sum(loss for _, loss in finite[-tenth:]) / tenth
    return LossCurve(len(rows), start, end, finite[0][0], finite[-1][0], bad)


def causes(findings: list[Finding], codes: tuple[str, ...], update_direction: str) -> list[Finding]:
    """The findings among `codes` that can explain the loss, most severe first, then in the
    order of `codes` (root causes before their consequences). An update-ratio finding counts
    only in the given direction: a too-high rate explains a rising loss, a too-low one a
    flat loss."""
    def fits(f: Finding) -> bool:
        return f.code in codes and (f.code != "LK202" or f.evidence.get("direction") == update_direction)
    return sorted((f for f in findings if fits(f)), key=lambda f: (-f.severity.rank, codes.index(f.code)))


def cause_text(found: list[Finding]) -> str:
    if not found:
        return ""
    parts = [f"{f.code} {f.name} at {f.where}" for f in found[:3]]
    return " Likely cause: " + "; ".join(parts) + "."
