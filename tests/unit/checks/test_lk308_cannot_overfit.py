"""LK308 cannot-overfit on hand-built probe measurements: the verdict's math alone, no run."""
from __future__ import annotations

import math

import pytest

from leaky.probe.config import ProbeConfig
from leaky.probe.stats import AuditNote, OverfitStats
from tests.check_cases import fires, quiet


CONFIG = ProbeConfig()


def _curve(first: float, last: float, steps: int = 200) -> tuple[float, ...]:
    """A geometric fall from `first` to `last` over `steps` losses."""
    ratio = (last / first) ** (1 / (steps - 1))
    return tuple(first * ratio ** i for i in range(steps))


def _stall(first: float, last: float, steps: int = 200) -> tuple[float, ...]:
    """A fall from `first` to `last` over the first quarter of the steps, then flat: a stall."""
    return _curve(first, last, steps // 4) + (last,) * (steps - steps // 4)


def test_lk308_fires_when_most_of_the_loss_is_left():
    dead = AuditNote("LK106", "dead-zone", "error", "round (train.py:22)", None, ("train.py", 22))
    stats = OverfitStats(_curve(1.6, 1.5), 200, audit=(dead,), loss_site=("train.py", 30))
    finding = fires("LK308", stats, config=CONFIG)
    assert finding.source.line == 22 and finding.evidence["remaining"] == pytest.approx(1.5 / 1.6, rel=1e-3)
    assert "LK106 dead-zone" in finding.message
    # without an audited cause there is no line to change: none is named (not loss.backward()'s), and it says so
    bare = fires("LK308", OverfitStats(_stall(1.6, 1.5), 200, loss_site=("train.py", 30)), config=CONFIG)
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
    losses = _stall(1.4, 0.58)
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


def test_lk308_needs_a_known_floor_and_a_stall_or_a_cause():
    """Measured against 0 a loss of unknown floor (a PPO surrogate stops at its trust region)
    shows nothing; a loss still falling steadily (a small learning rate) is slow, not stuck,
    unless the audit shows what stops it."""
    stalled = _stall(0.33, 0.17, 100)
    fires("LK308", OverfitStats(stalled, 100), config=CONFIG)
    quiet("LK308", OverfitStats(stalled, 100, floor_known=False), config=CONFIG)
    steady = tuple(3.296 - 0.00074 * i for i in range(100))          # Adam at 5e-4 on a zero table
    stats = OverfitStats(steady, 100)
    assert stats.steady_pace == pytest.approx(1.0) and stats.remaining > 0.9
    quiet("LK308", stats, config=CONFIG)
    dead = AuditNote("LK102", "dead-units", "error", "1 · relu (train.py:9)", "1", ("train.py", 9))
    assert fires("LK308", OverfitStats(steady, 100, audit=(dead,)), config=CONFIG).source.line == 9
    # a stall: fast at first, then (almost) flat
    assert OverfitStats(_stall(1.6, 1.5, 100)[:-1] + (1.4999,), 100).steady_pace is None


def test_tied_floor_is_what_the_best_output_per_tie_scores():
    """Rows given one output (a bigram's rows of one token) score at best their labels'
    entropy, or their targets' variance: checked against the loss of that best output."""
    import torch
    import torch.nn.functional as F

    from leaky.probe.floor import tied_floor

    torch.manual_seed(0)
    tokens, y = torch.randint(0, 5, (64,)), torch.randint(0, 7, (64,))
    floor, distinct, rows = tied_floor("cross_entropy", {"input": torch.randn(5, 7)[tokens], "target": y})
    frequencies = torch.stack([torch.bincount(y[tokens == k], minlength=7).float() / (tokens == k).sum()
                               for k in range(5)])
    assert floor == pytest.approx(F.cross_entropy(frequencies.clamp_min(1e-30).log()[tokens], y).item(), rel=1e-5)
    assert (distinct, rows) == (5, 64)
    t = torch.randn(64, 3)
    floor, _, _ = tied_floor("mse_loss", {"input": torch.randn(5, 3)[tokens], "target": t})
    means = torch.stack([t[tokens == k].mean(0) for k in range(5)])[tokens]
    assert floor == pytest.approx(F.mse_loss(means, t).item(), rel=1e-5)
    assert tied_floor("cross_entropy", {"input": torch.randn(64, 7), "target": y}) is None   # every row its own
    assert tied_floor("cross_entropy", {"input": torch.zeros(64, 7), "target": y}) is None   # one for all: a fault
    # LK308: judged against that floor, a bigram that fitted what it can is not failed; with a cause it is
    fitted = _stall(3.3, 1.53, 100)
    quiet("LK308", OverfitStats(fitted, 100, tied=(1.487, 26, 246)), config=CONFIG)
    fires("LK308", OverfitStats(fitted, 100, tied=(0.2, 26, 246)), config=CONFIG)       # far above even that
    dead = AuditNote("LK102", "dead-units", "error", "1 · relu (train.py:9)", "1", ("train.py", 9))
    fires("LK308", OverfitStats(fitted, 100, tied=(1.487, 26, 246), audit=(dead,)), config=CONFIG)
