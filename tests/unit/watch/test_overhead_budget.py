"""`leaky watch --overhead P%` and `--every N` on the command line: what the run says it cost,
in its last line, its JSON report and its stored run (the budget's own logic: tests/unit/record/test_budget.py)."""
from __future__ import annotations

import json

import pytest

from leaky.cli import main
from leaky.cli.parser import _share
from leaky.report.overhead import overhead_line
from tests.unit.watch.test_watch import SCRIPT


@pytest.mark.parametrize("text, share", [("2%", 0.02), ("0.5%", 0.005), ("5", 0.05), ("0.1", 0.1)])
def test_the_budget_is_read_as_a_percentage(text, share):
    assert _share(text) == pytest.approx(share)


@pytest.mark.parametrize("text", ["0", "0%", "100%", "-1%", "two"])
def test_a_budget_outside_0_and_100_percent_is_refused(text, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["watch", f"--overhead={text}", "--store", str(tmp_path / "runs.db"), "train.py"])
    assert "percentage" in capsys.readouterr().err


def test_a_watch_says_what_it_cost_in_its_last_line_its_report_and_its_store(tmp_path, capsys):
    script, store, report = tmp_path / "train.py", tmp_path / "runs.db", tmp_path / "report.json"
    script.write_text(SCRIPT)
    assert main(["watch", "--overhead", "5%", "--store", str(store), "--json", str(report), str(script), "300"]) == 0
    out = capsys.readouterr().out
    overhead = json.loads(report.read_text())["run"]["overhead"]
    assert overhead["schedule"] == "budget" and overhead["budget"] == pytest.approx(0.05)
    assert overhead["steps"] == 300 and overhead["sampled_steps"] >= 1
    assert overhead["measured"] is not None and overhead["plain_step_ms"] > 0
    assert "leaky watch cost" in out and "(budget 5%)" in out
    assert main(["show", "latest", "--store", str(store)]) == 0
    assert "(budget 5%)" in capsys.readouterr().out


def test_an_explicit_interval_overrides_the_budget_and_is_measured(tmp_path, capsys):
    script, report = tmp_path / "train.py", tmp_path / "report.json"
    script.write_text(SCRIPT)
    assert main(["watch", "--every", "10", "--overhead", "1%", "--store", str(tmp_path / "runs.db"),
                 "--json", str(report), str(script), "50"]) == 0
    captured = capsys.readouterr()
    assert "--overhead 1.0% is not used" in captured.err
    overhead = json.loads(report.read_text())["run"]["overhead"]
    assert overhead["schedule"] == "every" and overhead["every"] == 10 and overhead["sampled_steps"] == 5
    assert "(--every 10)" in captured.out


def test_the_line_says_when_the_monitor_alone_is_over_the_budget():
    line = overhead_line({"schedule": "budget", "budget": 0.02, "measured": 0.06, "steps": 600, "sampled_steps": 1,
                          "plain_step_ms": 1.0, "monitor_ms": 0.05, "sampled_extra_ms": 9.0,
                          "first_step_extra_ms": 30.0, "norm_every": 64, "every": None, "reason": None})
    assert "6% of the training time (budget 2%)" in line
    assert "gradient norm every 64 steps" in line and "5%, over the budget" in line
    assert overhead_line(None) is None


@pytest.mark.parametrize("mean, over", [(1.05, True), (6.0, False)])
def test_the_monitor_is_over_the_budget_against_the_mean_plain_step(mean, over):
    """CleanRL's PPO: 2.8 ms updates between rollouts. The budget is a share of all the plain
    time, rollouts included, so the monitor's 0.05 ms is 0.8% of a 6 ms mean step, not 5% of
    the 1 ms median: not over the budget, and the line must not say it is."""
    line = overhead_line({"schedule": "budget", "budget": 0.02, "measured": 0.02, "steps": 600, "sampled_steps": 1,
                          "plain_step_ms": 1.0, "plain_mean_ms": mean, "monitor_ms": 0.05, "sampled_extra_ms": 9.0,
                          "first_step_extra_ms": 30.0, "norm_every": 64, "every": None, "reason": None})
    assert ("over the budget" in line) is over
    if over:
        assert "this model's 1.05 ms step that alone is 4.8%" in line


@pytest.mark.parametrize("sampled, steps, told", [(1, 90, True), (1, 5, False), (3, 900, False)])
def test_the_line_says_when_only_the_first_step_was_observed(sampled, steps, told):
    line = overhead_line({"schedule": "budget", "budget": 0.02, "measured": 0.016, "steps": steps,
                          "sampled_steps": sampled, "plain_step_ms": 64.0, "monitor_ms": 0.3,
                          "sampled_extra_ms": 157.0, "first_step_extra_ms": 157.0, "norm_every": 1,
                          "every": None, "reason": None})
    assert ("only the first step was observed in detail" in line) is told
    assert "over the budget" not in line


def test_a_fixed_interval_does_not_speak_of_the_budget():
    section = {"schedule": "every", "budget": 0.02, "measured": 0.2, "steps": 300, "sampled_steps": 3,
               "plain_step_ms": 2.0, "monitor_ms": 0.11, "sampled_extra_ms": 20.0, "first_step_extra_ms": 60.0,
               "norm_every": 1, "every": 100, "reason": "several ranks must sample the same steps"}
    line = overhead_line(section)
    assert "(--every 100: several ranks must sample the same steps)" in line and "over the budget" not in line
