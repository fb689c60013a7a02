"""Where two loss curves part (leaky/diff/loss.py). The curves are built by hand: the
function reads numbers only, and its rule (smoothed over WINDOW steps, beyond SPREAD times
the chance gap and FLOOR of the level, for WINDOW steps in a row) is checked at its edges."""
from __future__ import annotations

import math
import random

from leaky.diff.loss import FLOOR, WINDOW, chance_gap, compare_losses, parted_at


def _curve(seed: int, steps: int = 60, bend: int | None = None, level: float = 2.0) -> list[float]:
    rng = random.Random(seed)
    out = []
    for t in range(steps):
        value = level * math.exp(-t / 30) + rng.gauss(0, 0.05)
        if bend is not None and t >= bend:
            value += 0.5 * (t - bend + 1) / 5
        out.append(value)
    return out


def _series(losses, optimizer=0):
    return {"series": [{"step": i, "loss": v, "optimizer": optimizer} for i, v in enumerate(losses)]}


def test_two_seeds_of_one_curve_do_not_part():
    a, b = _curve(0), _curve(1)
    gap = chance_gap(a, [_curve(2), _curve(3)])
    assert parted_at(a, b, gap) is None


def test_a_curve_that_bends_away_parts_near_the_bend():
    a, b = _curve(0), _curve(1, bend=30)
    gap = chance_gap(a, [_curve(2), _curve(3)])
    step = parted_at(a, b, gap)
    assert step is not None and 30 <= step <= 30 + 2 * WINDOW


def test_without_reruns_the_gap_comes_from_the_curve_itself():
    a = _curve(0)
    gap = chance_gap(a, [])
    assert 0 < gap < 0.2
    assert parted_at(a, _curve(1), gap) is None
    assert parted_at(a, _curve(1, bend=20), gap) is not None


def test_a_tiny_steady_offset_below_the_floor_is_no_parting():
    a = [1.0] * 40
    b = [1.0 + FLOOR / 2] * 40
    assert parted_at(a, b, 0.0) is None
    assert parted_at(a, [1.0 + 2 * FLOOR] * 40, 0.0) == 0


def test_each_optimizer_is_compared_on_its_own_curve():
    a = {"series": _series(_curve(0), 0)["series"] + _series(_curve(5), 1)["series"]}
    b = {"series": _series(_curve(1), 0)["series"] + _series(_curve(6, bend=10), 1)["series"]}
    rows = compare_losses(a, b, [])
    assert [row["optimizer"] for row in rows] == [0, 1]
    assert rows[0]["parted_at"] is None and rows[1]["parted_at"] is not None
    assert "step" in rows[1]["meaning"]
