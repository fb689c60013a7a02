"""Where two loss curves part, per optimizer.

Each curve is smoothed by a trailing mean over WINDOW steps (one batch's loss is noisy).
The chance gap between two runs of the same program is the larger of the root-mean-square
gap between A and its re-runs with shifted seeds, step by step, and the scatter of A's own
losses around its smoothed curve, as the error of a mean of WINDOW of them, for each of the
two curves. B parts from A at the first step from which its smoothed loss stays more than
SPREAD times that gap, and more than FLOOR of A's own level, away from A's for WINDOW steps
in a row (or to the end).
"""
from __future__ import annotations

import math

from leaky.diff.noise import SPREAD
from leaky.numbers import num

WINDOW = 5
FLOOR = 0.02   # a gap below 2% of the loss itself is no parting, however steady the curves


def curves(report: dict) -> dict[int, list[float | None]]:
    """Per optimizer index (0 when none stepped): its losses in step order."""
    out: dict[int, list[float | None]] = {}
    for row in report.get("series") or []:
        loss = row.get("loss")
        out.setdefault(row.get("optimizer") or 0, []).append(loss if isinstance(loss, (int, float)) else None)
    return out


def _smooth(values: list[float | None]) -> list[float | None]:
    out = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - WINDOW + 1):i + 1] if v is not None and math.isfinite(v)]
        out.append(sum(window) / len(window) if window else None)
    return out


def _rms(gaps: list[float]) -> float:
    return math.sqrt(sum(g * g for g in gaps) / len(gaps)) if gaps else 0.0


def chance_gap(a: list[float | None], reruns: list[list[float | None]]) -> float:
    """The root-mean-square gap between smoothed curves of the same program by chance: the
    larger of the gap between A and its re-runs and the scatter of A's own steps.

    NOTE: both, not the re-runs alone: a re-run shifts the seeds given to torch, random and
    numpy, not a seed given to a torch.Generator of the program's own (a data loader's), so
    it can miss the batch-to-batch scatter that another data seed brings."""
    smooth_a = _smooth(a)
    gaps = [y - x for rerun in reruns for x, y in zip(smooth_a, _smooth(rerun)) if x is not None and y is not None]
    residuals = [v - s for v, s in zip(a, smooth_a) if v is not None and s is not None and math.isfinite(v)]
    return max(_rms(gaps), math.sqrt(2.0) * _rms(residuals) / math.sqrt(WINDOW))


def parted_at(a: list[float | None], b: list[float | None], gap: float) -> int | None:
    """The first step from which B's smoothed loss stays beyond the chance gap from A's."""
    smooth_a, smooth_b = _smooth(a), _smooth(b)
    steps = min(len(smooth_a), len(smooth_b))

    def apart(i: int) -> bool:
        x, y = smooth_a[i], smooth_b[i]
        if x is None or y is None:
            return (x is None) != (y is None)
        return abs(y - x) > max(SPREAD * gap, FLOOR * abs(x))

    for i in range(steps):
        if all(apart(j) for j in range(i, min(i + WINDOW, steps))):
            return i
    return None


def compare_losses(a: dict, b: dict, reruns: list[dict]) -> list[dict]:
    """Per optimizer: both curves, the step where they part (or None), the chance gap."""
    a_curves, b_curves = curves(a), curves(b)
    rerun_curves = [curves(r) for r in reruns]
    rows = []
    for index in sorted(set(a_curves) | set(b_curves)):
        x, y = a_curves.get(index, []), b_curves.get(index, [])
        gap = chance_gap(x, [r[index] for r in rerun_curves if index in r])
        step = parted_at(x, y, gap) if x and y else None
        meaning = None
        if step is not None:
            first = next((v for v in _smooth(x)[step:] if v is not None), None)
            other = next((v for v in _smooth(y)[step:] if v is not None), None)
            meaning = (f"from step {step}, B's loss (smoothed over {WINDOW} steps) is {num(other)} where A's is "
                       f"{num(first)}, beyond the {num(SPREAD * gap)} that chance explains")
        elif not x or not y:
            meaning = f"optimizer {index} stepped in {'A' if x else 'B'} only"
        rows.append({"optimizer": index, "a": x, "b": y, "parted_at": step, "noise": gap, "meaning": meaning})
    return rows
