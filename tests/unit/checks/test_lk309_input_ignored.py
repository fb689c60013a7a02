"""LK309 input-ignored on hand-built probe measurements: the verdict's math alone, no run."""
from __future__ import annotations

import pytest

from leaky.probe.config import ProbeConfig
from leaky.probe.stats import AuditNote, ZeroedInputStats
from tests.check_cases import fires, quiet


CONFIG = ProbeConfig()


def _inputs(real: float, zeroed: float, margin: float = 0.02, **extra) -> ZeroedInputStats:
    return ZeroedInputStats(real, zeroed, margin, (real, real + margin / 2), **extra)


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


def test_lk309_no_better_is_no_evidence_where_the_run_could_not_show_better():
    lost = {"op": "mul", "file": "train.py", "line": 21, "module": ""}
    rl = {"file": "dqn.py", "line": 66, "model": "QNetwork", "called_at": {"file": "dqn.py", "line": 65},
          "met": {"op": "mse_loss", "file": "dqn.py", "line": 68}}
    # targets computed from a model: the zeros change them too
    quiet("LK309", _inputs(0.91, 0.89, margin=0.04, targets_from_model=rl, reached=True), config=CONFIG)
    fires("LK309", _inputs(0.91, 0.89, margin=0.04, targets_from_model=rl, lost=lost), config=CONFIG)
    # a loss that fell by no more than the noise: learned too little to differ
    slow = tuple(3.295 - 0.0005 * i for i in range(40))
    quiet("LK309", _inputs(3.277, 3.288, margin=0.033, losses=slow, reached=True), config=CONFIG)
    # still falling: K more steps would lower it by more than the noise
    falling = tuple(3.295 - 0.0005 * i for i in range(100))
    stats = _inputs(3.246, 3.275, margin=0.0325, losses=falling, reached=True)
    assert stats.fallen > stats.margin and stats.still_falling == pytest.approx(0.05)
    quiet("LK309", stats, config=CONFIG)
    # learned, then stopped, and no better than zeros: the input is not used
    learned = tuple(1.9 - 0.01 * i for i in range(30)) + (1.6,) * 70
    fires("LK309", _inputs(1.6, 1.6, margin=0.016, losses=learned, reached=True), config=CONFIG)
