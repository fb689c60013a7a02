"""The loss and gradient-norm pictures of a stored run (`leaky show`'s sparklines, the HTML
report's charts), where a watch takes the gradient norm on a schedule (record/budget.py):
a step without a norm is a step not measured, not a non-finite one, and a norm that a clip
holds at its limit is a level line, not noise blown up to the full height."""
from __future__ import annotations

import io
import math
import re

import pytest
import torch
import torch.nn.functional as F
from rich.console import Console
from torch import nn

import leaky
from leaky.report.html import render_html, run_payload
from leaky.report.runs import show_run, sparkline
from leaky.store import Store
from tests.conftest import no_leaky_left


def _watched(path, steps: int, norm_every: int, clip: float | None = None) -> int:
    """A real watch into a store, the monitor's norm every `norm_every` steps."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with leaky.watch(every=10**6, store=path) as run:
        run.recorder.schedule.norm_every = norm_every
        for step in range(steps):
            x, y = torch.randn(16, 8) * (1 + step), torch.randint(0, 2, (16,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
            opt.step()
    assert no_leaky_left() == []
    return run.run_id


def _shown(path, run_id: int) -> tuple[str, list]:
    buffer = io.StringIO()
    with Store(str(path)) as store:
        Console(file=buffer, width=120, force_terminal=True, color_system=None).print(show_run(store, run_id))
        steps = store.steps(run_id)
    return buffer.getvalue(), steps


def _line(shown: str, name: str) -> str:
    return next(line for line in shown.splitlines() if line.startswith(name))


def test_steps_without_a_norm_are_left_out_of_the_pictures_not_drawn_as_non_finite(tmp_path):
    path = tmp_path / "runs.db"
    run_id = _watched(path, steps=80, norm_every=8)
    shown, steps = _shown(path, run_id)
    taken = sum(s["grad_norm"] is not None for s in steps)
    assert 8 <= taken < 40 and not any(s["nonfinite"] for s in steps)
    norm = _line(shown, "grad norm")
    assert "×" not in norm and f"(taken on {taken} of 80 steps)" in norm, norm
    assert "taken on" not in _line(shown, "loss")          # every step has its loss
    with Store(str(path)) as store:
        page = render_html({}, run_payload(store, run_id))
    assert f"Taken on {taken} of 80 steps" in page
    chart = page[page.index('<svg class="chart gradnorm"'):]
    chart = chart[:chart.index("</svg>")]
    assert chart.count("<polyline") == 1 and "<circle" not in chart   # one line through the measured steps


def test_a_norm_held_at_a_clip_s_limit_is_a_level_line(tmp_path):
    path = tmp_path / "runs.db"
    run_id = _watched(path, steps=30, norm_every=4, clip=0.3)   # the clip gives the norm between
    shown, steps = _shown(path, run_id)
    norms = [s["grad_norm"] for s in steps]
    assert all(n == pytest.approx(0.3, rel=1e-4) for n in norms)
    assert len(set(norms)) > 1          # not all the same float: the picture must not swing
    line = _line(shown, "grad norm")
    bars = re.match(r"grad norm (\S+)", line).group(1)
    assert len(set(bars)) == 1 and "0.3 → 0.3" in line
    assert "(after the script's clip_grad_norm_)" in line and "taken on" not in line
    unclipped, _ = _shown(path, _watched(path, steps=30, norm_every=4))
    assert "clip_grad_norm_" not in _line(unclipped, "grad norm")


def test_a_non_finite_value_is_a_cross_and_a_missing_one_is_skipped():
    nan = math.nan
    assert sparkline([1.0, None, 2.0, None, nan, 3.0]) == "▁▄×█"
    assert sparkline([None, None]) == ""
    assert sparkline([nan, None]) == "×"
    many = [float(i) for i in range(600)]
    assert len(sparkline(many, width=60)) == 60 and sparkline(many, width=60)[0] == "▁"


def test_a_run_without_an_optimizer_says_it_has_no_gradient_norm(tmp_path):
    """The classic char-RNN tutorial updates its parameters by hand (p.data.add_(p.grad, alpha=-lr)):
    no optimizer step, so the monitor has no gradient norm to take, and neither the last line
    nor `leaky show` may claim one."""
    from leaky.report.overhead import overhead_line

    path = tmp_path / "runs.db"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    with leaky.watch(every=10**6, store=path) as run:
        for _ in range(30):
            x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.05)
    overhead = run.report.run["overhead"]
    assert overhead["optimizer_steps"] == 0
    assert "for the loss (no optimizer step, so no gradient norm)" in overhead_line(overhead)
    shown, steps = _shown(path, run.run_id)
    assert all(s["grad_norm"] is None for s in steps)
    assert _line(shown, "grad norm") == "grad norm not measured (no optimizer step: the parameters were updated by hand)"
    assert no_leaky_left() == []
    with_optimizer = _watched(tmp_path / "other.db", steps=12, norm_every=1)
    with Store(str(tmp_path / "other.db")) as store:
        assert store.report(with_optimizer)["run"]["overhead"]["optimizer_steps"] == 12
