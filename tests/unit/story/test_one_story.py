"""One root cause, one story; and learning-rate advice that agrees with the run.

- A deep sigmoid MLP whose gradient vanishes: LK103 and its fix fill the first screen at 80
  columns, and the stale and frozen weights it starves (LK201, LK202) are told under it, with
  its advice, not "raise the learning rate" or "freeze on purpose". Their claims are checked
  against the weights themselves.
- A high learning rate on purpose, with the loss still falling: LK202 is information.
- A StepLR stepped every batch where its steps meant epochs: the weights freeze once the rate
  in force is ~1e-7 of what it was, and LK202 says so with that rate and the line of
  `scheduler.step()`; stepped per epoch, the same program is quiet.
"""
from __future__ import annotations

import json
import runpy
import textwrap
from pathlib import Path

import torch

import leaky
from leaky.checks._util import num
from leaky.cli import main
from leaky.finding import Severity
from leaky.report.terminal import render_text

CONTRADICTIONS = ("Raise the learning rate", "freeze on purpose", "Lower the learning rate")


def _script(tmp_path: Path, body: str, **marks: str) -> tuple[Path, dict[str, int]]:
    text = textwrap.dedent(body).lstrip("\n")
    for name, value in marks.items():
        text = text.replace(name, value)
    path = tmp_path / "train.py"
    path.write_text(text)
    lines = {line.split("# MARK: ")[1].strip(): i for i, line in enumerate(text.splitlines(), 1) if "# MARK: " in line}
    return path, lines


DEEP_SIGMOID = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
x = torch.randn(512, 32)
y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4:8].sum(1) > 0).long()
layers = []
dims = [32] + [64] * 10
for a, b in zip(dims[:-1], dims[1:]):
    layers += [nn.Linear(a, b), nn.Sigmoid()]  # MARK: layers
model = nn.Sequential(*layers, nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
start = {name: p.detach().clone() for name, p in model.named_parameters()}
for step in range(30):
    idx = torch.randint(0, 512, (64,))
    loss = F.cross_entropy(model(x[idx]), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_vanishing_gradient_is_one_story_on_the_first_screen(tmp_path):
    path, marks = _script(tmp_path, DEEP_SIGMOID)
    with leaky.audit(steps=None) as run:
        script = runpy.run_path(str(path))
    report = run.report
    text = render_text(report, width=80)
    screen = "\n".join(text.splitlines()[:24])
    assert "LK103 vanishing-gradient" in screen and "fix: Keep each local gain near 1" in screen, text
    assert not any(words in text for words in CONTRADICTIONS), text
    (root,) = report.by_code("LK103")
    assert report.findings[0] is root and root.source.line == marks["layers"]
    starved = [f for f in report.findings if f.code in ("LK201", "LK202")]
    assert {f.code for f in starved} == {"LK201", "LK202"}, [f.code for f in report.findings]
    for finding in starved:
        assert finding.evidence["explained_by"] == ["LK103"], finding
        assert not any(words in finding.fix for words in CONTRADICTIONS) and "LK103" in finding.fix
        assert finding.cause.line == marks["layers"]
    # the claims, checked on the weights: LK201's are exactly unchanged, LK202's barely moved
    model, start = script["model"], script["start"]
    now = dict(model.named_parameters())
    for finding in report.by_code("LK201"):
        for name in finding.evidence["parameters"]:
            assert torch.equal(now[name], start[name]), name
    for finding in report.by_code("LK202"):
        name = finding.evidence["parameter"]
        moved = (now[name] - start[name]).norm() / start[name].norm()
        assert 0 < moved < 30 * 1e-7, (name, float(moved))
    # every finding of the run is told under the root: the terminal shows each in one line
    assert text.count("↳") == len(report.findings) - 1


HIGH_LR = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
centres = torch.randn(8, 32) * 0.3
labels = torch.randint(0, 8, (1024,))
x = centres[labels] + torch.randn(1024, 32)
model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 8))
opt = torch.optim.Adam(model.parameters(), lr=LR)  # MARK: optimizer
for step in range(40):
    i = torch.randint(0, 1024, (128,))
    loss = F.cross_entropy(model(x[i]), labels[i])
    opt.zero_grad(); loss.backward(); opt.step()
"""


def _audit(tmp_path: Path, script: Path, *extra: str) -> dict:
    out = tmp_path / "report.json"
    main(["audit", "--no-table", "--json", str(out), *extra, str(script)])
    return json.loads(out.read_text())


def test_a_high_rate_while_the_loss_falls_is_information(tmp_path):
    # Adam at 0.05: the first update is 1.4x the head's weight, and the loss falls from 2.1 to
    # ~0.7 in 40 steps (at 0.005, the "lower it x0.1" advice: ~0.9)
    path, _ = _script(tmp_path, HIGH_LR, LR="0.05")
    report = _audit(tmp_path, path, "--steps", "all")
    high = [f for f in report["findings"] if f["code"] == "LK202"]
    assert high and all(f["severity"] == "info" and f["evidence"]["direction"] == "high" for f in high), high
    assert all("Lower the learning rate" not in f["fix"] and "still falling" in f["message"] for f in high)


def test_a_high_rate_whose_loss_jumps_about_is_still_a_warning(tmp_path):
    path, marks = _script(tmp_path, HIGH_LR.replace("* 0.3", "* 0.5"), LR="0.1")
    report = _audit(tmp_path, path, "--steps", "all")
    (high,) = [f for f in report["findings"] if f["code"] == "LK202" and f["severity"] == "warning"]
    assert high["cause"]["line"] == marks["optimizer"] and "Lower the learning rate" in high["fix"]


SCHEDULED = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
torch.manual_seed(0)
x = torch.randn(640, 16); y = (x[:, :3].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
scheduler = StepLR(optimizer, step_size=1, gamma=0.7)  # MARK: built
for epoch in range(8):
    for i in range(0, 640, 64):
        loss = F.cross_entropy(model(x[i:i + 64]), y[i:i + 64])
        optimizer.zero_grad(); loss.backward(); optimizer.step()
        BATCH  # MARK: batch
    EPOCH
"""


def test_a_scheduler_stepped_every_batch_is_found_with_the_rate_in_force(tmp_path):
    path, marks = _script(tmp_path, SCHEDULED, BATCH="scheduler.step()", EPOCH="pass")
    report = _audit(tmp_path, path, "--steps", "all")
    (finding,) = [f for f in report["findings"] if f["code"] == "LK202" and f["severity"] == "warning"]
    evidence = finding["evidence"]
    assert evidence["direction"] == "low" and evidence["scheduler_per_batch"] is True
    assert 1e-16 < evidence["lr_last"] < 1e-11        # 0.7^79 = 6e-13, not the 1 Adadelta was built with
    rate = num(evidence["lr_last"])
    assert f"{rate} by step 79" in finding["message"] and "learning rate 1 of" not in finding["message"]
    assert finding["cause"]["line"] == marks["batch"] and finding["cause"]["what"].endswith(rate)
    assert "StepLR (built at train.py:%d)" % marks["built"] in finding["message"]
    assert "once per epoch" in finding["fix"]


def test_a_scheduler_stepped_every_epoch_is_quiet(tmp_path):
    path, _ = _script(tmp_path, SCHEDULED, BATCH="pass", EPOCH="scheduler.step()")
    report = _audit(tmp_path, path, "--steps", "all")
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    assert [f for f in report["findings"] if f["code"] == "LK202"] == []


def test_only_the_users_scheduler_step_calls_count(tmp_path):
    """A scheduler's own first step (in its __init__) is not a call of the script's."""
    path, marks = _script(tmp_path, SCHEDULED, BATCH="pass", EPOCH="scheduler.step()  # MARK: epoch")
    with leaky.audit(steps=None) as run:
        runpy.run_path(str(path))
    (optimizer,) = run.stats.optimizers
    assert optimizer.scheduler.step_calls == 8 and optimizer.scheduler.step_source.line == marks["epoch"]
    assert run.report.worst() in (None, Severity.INFO)


# -- the decayed rule on hand-built stats ------------------------------------------------------
def _decay_stats(frozen_from: int, losses, lr_falls: bool = True, steps: int = 80):
    from leaky.stats import SchedulerStats
    from leaky.testing import optimizer, param, series, stats

    lrs = [0.7 ** i if lr_falls else 1.0 for i in range(steps)]
    ratios = [(i, 1e-2 if i < frozen_from else 1e-9) for i in range(steps)]
    sched = SchedulerStats("StepLR", None, step_calls=steps)
    return stats(series=series(losses=losses, lr=lrs), params=(param(update_ratios=ratios, optimizer=0, group=0),),
                 optimizers=(optimizer(kind="Adadelta", lr=1.0, scheduler=sched),))


def test_the_decayed_rule_needs_a_long_frozen_stretch_a_fallen_rate_and_a_flat_loss():
    from tests.check_cases import findings_of

    stalled = [1.0 - 0.01 * i for i in range(33)] + [0.67] * 47
    (finding,) = findings_of("LK202", _decay_stats(33, stalled))
    assert finding.severity is Severity.WARNING and finding.evidence["rule"] == "decayed"
    assert finding.evidence["lr_last"] == 0.7 ** 79 and finding.evidence["scheduler_per_batch"]
    # a schedule annealed toward 0: frozen on its last 4 of 80 steps only
    assert findings_of("LK202", _decay_stats(76, stalled)) == []
    # the rate as built all along: whatever froze the weight, it was not the rate's decay
    assert findings_of("LK202", _decay_stats(33, stalled, lr_falls=False)) == []
    # still learning while frozen (the loss keeps falling): information
    falling = [1.0 - 0.01 * i for i in range(80)]
    (info,) = findings_of("LK202", _decay_stats(33, falling))
    assert info.severity is Severity.INFO
