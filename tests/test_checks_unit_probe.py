"""LK308 and LK309 on hand-built probe measurements: the verdict's math alone, no run."""
from __future__ import annotations

import math

import pytest

from leaky.probe.config import ProbeConfig
from leaky.probe.stats import AuditNote, InputStats, OverfitStats
from tests.check_cases import fires, quiet

CONFIG = ProbeConfig()


def _curve(first: float, last: float, steps: int = 200) -> tuple[float, ...]:
    """A geometric fall from `first` to `last` over `steps` losses."""
    ratio = (last / first) ** (1 / (steps - 1))
    return tuple(first * ratio ** i for i in range(steps))


def test_lk308_fires_when_most_of_the_loss_is_left():
    dead = AuditNote("LK106", "dead-zone", "error", "round (train.py:22)", None, ("train.py", 22))
    stats = OverfitStats(_curve(1.6, 1.5), 200, audit=(dead,), loss_site=("train.py", 30))
    finding = fires("LK308", stats, config=CONFIG)
    assert finding.source.line == 22 and finding.evidence["remaining"] == pytest.approx(1.5 / 1.6, rel=1e-3)
    assert "LK106 dead-zone" in finding.message
    # without an audited cause there is no line to change: none is named (not loss.backward()'s), and it says so
    bare = fires("LK308", OverfitStats(_curve(1.6, 1.5), 200, loss_site=("train.py", 30)), config=CONFIG)
    assert bare.source is None and bare.module is None and "cannot tell which line" in bare.message
    # a cause says why in its own words, and its fix is the fix
    head = AuditNote("LK301", "loss-output-mismatch", "error", "3 · softplus (train.py:8)", "3", ("train.py", 8),
                     "mse_loss regresses the output of softplus, which lies in [0, inf], onto targets in [-3, 3]",
                     "Drop the squashing on the output layer")
    placed = fires("LK308", OverfitStats(_curve(1.6, 1.5), 200, audit=(head,)), config=CONFIG)
    assert (placed.module, placed.source.line) == ("3", 8) and "lies in [0, inf]" in placed.message
    assert placed.fix.endswith("Drop the squashing on the output layer")


def test_lk308_judges_each_window_against_its_own_floor():
    """Mixup draws its weights anew each step: the floor of the first loss and of the last
    steps' mean differ, and each is subtracted from its own loss."""
    losses = _curve(1.4, 0.58)
    floors = (0.40,) + (0.55,) * 199
    stats = OverfitStats(losses, 200, floor=0.55, floors=floors)
    assert stats.first_floor == 0.40 and stats.remaining == pytest.approx((stats.last - 0.55) / (1.4 - 0.40))
    quiet("LK308", stats, config=CONFIG)
    fires("LK308", OverfitStats(losses, 200), config=CONFIG)          # against 0 it keeps 41%


def test_lk308_quiet_for_a_memorised_batch_and_at_its_floor():
    quiet("LK308", OverfitStats(_curve(1.6, 0.01), 200), config=CONFIG)
    # label smoothing: 0.52 left of 1.6, but the floor is 0.5: (0.52 - 0.5) / (1.6 - 0.5) < 0.2
    quiet("LK308", OverfitStats(_curve(1.6, 0.52), 200, floor=0.5), config=CONFIG)
    quiet("LK308", OverfitStats(_curve(1.6, 1.6 * 0.19), 200), config=CONFIG)        # just under the threshold
    fires("LK308", OverfitStats(_curve(1.6, 1.6 * 0.21), 200), config=CONFIG)        # just over


def test_lk308_pace_and_remaining():
    flat = OverfitStats((1.0,) * 200, 200)
    assert flat.remaining == 1.0 and flat.steps_to(0.2) == math.inf
    falling = OverfitStats(tuple(1.0 - 0.004 * i for i in range(200)), 200)   # a straight line
    # r_K = mean of steps 195-199 = 0.212; r_3K/4 = mean of 145-149 = 0.412: 0.2 per K/4 steps
    assert falling.remaining == pytest.approx(0.212) and falling.steps_to(0.1) == pytest.approx(0.112 / 0.2 / 4)
    assert OverfitStats((1.0, float("nan")), 200).last == math.inf
    assert OverfitStats((0.5,) * 10, 10, floor=0.5).remaining is None    # nothing to reduce


def _inputs(real: float, zeroed: float, margin: float = 0.02, **extra) -> InputStats:
    return InputStats(real, zeroed, margin, (real, real + margin / 2), **extra)


def test_lk309_fires_when_real_inputs_do_no_better():
    lost = {"op": "mul", "file": "train.py", "line": 21, "module": ""}
    finding = fires("LK309", _inputs(1.57, 1.57, lost=lost), config=CONFIG)
    assert (finding.source.file, finding.source.line, finding.op) == ("train.py", 21, "mul")
    assert "no better than" in finding.message
    worse = fires("LK309", _inputs(1.2, 1.0, forward={"file": "t.py", "line": 9, "model": "Net"}, reached=False),
                  config=CONFIG)
    assert "worse than" in worse.message and worse.source.line == 9
    cut = AuditNote("LK108", "no-gradient-path", "error", "body", "body", ("t.py", 4))
    fires("LK309", _inputs(1.2, 1.0, audit=(cut,)), config=CONFIG)       # worse, through a cut path
    quiet("LK309", _inputs(1.2, 1.0, reached=True), config=CONFIG)       # worse, but learnable: not yet learned


def test_lk309_at_the_line_that_reordered_one_side_or_says_it_cannot():
    mispaired = {"file": "train.py", "line": 9, "side": "the inputs", "other": None, "inputs": "7, 3, ...",
                 "targets": "0, 1, ...", "met": None}
    finding = fires("LK309", _inputs(1.03, 1.02, mispaired=mispaired, reached=True), config=CONFIG)
    assert (finding.source.file, finding.source.line) == ("train.py", 9)
    assert "not the same samples" in finding.message and "torch.randperm" in finding.fix
    bare = fires("LK309", _inputs(1.03, 1.02, reached=True), config=CONFIG)
    assert bare.source is None and "cannot tell which line" in bare.message


def test_lk309_quiet_when_real_inputs_beat_the_zeros_beyond_the_noise():
    quiet("LK309", _inputs(0.26, 1.57), config=CONFIG)
    quiet("LK309", _inputs(1.50, 1.57, margin=0.05), config=CONFIG)     # 0.07 better, noise 0.05
    fires("LK309", _inputs(1.54, 1.57, margin=0.05), config=CONFIG)     # 0.03 better: within the noise
