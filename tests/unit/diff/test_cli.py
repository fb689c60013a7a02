"""`leaky diff` on the command line: its three kinds of input, the JSON it writes, and its
exit statuses (0: no difference beyond the noise, 1: B parts from A, 2: no comparison)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from leaky.cli import main

PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "classifier.py")


def _audit_json(tmp_path, name: str, script: str, *args: str) -> str:
    out = str(tmp_path / f"{name}.json")
    assert main(["audit", "--steps", "20", "--json", out, "--fail-on", "never", script, *args]) == 0
    return out


def _clamped(tmp_path) -> str:
    with open(PROGRAM, encoding="utf-8") as handle:
        text = handle.read().replace("h = F.gelu(self.fc2(h))", "h = torch.clamp(self.fc2(h), 0, 1)")
    path = tmp_path / "clamped.py"
    path.write_text(text)
    return str(path)


def test_two_reports_of_one_program_give_exit_0_and_two_that_differ_exit_1(tmp_path, capsys):
    a = _audit_json(tmp_path, "a", PROGRAM)
    same = _audit_json(tmp_path, "same", PROGRAM, "--seed", "3")
    changed = _audit_json(tmp_path, "changed", _clamped(tmp_path))
    capsys.readouterr()
    out = tmp_path / "diff.json"
    assert main(["diff", a, same, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "leaky/diff-v1" and data["verdict"] == "same"
    assert data["noise"]["source"] == "steps"   # two reports: A cannot be run again
    assert main(["diff", a, changed, "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["first_parted"]["status"] == "changed_op"
    assert data["first_parted"]["b"]["op"] == "clamp" and data["first_parted"]["a"]["op"] == "gelu"
    text = capsys.readouterr().out
    assert "First parted site" in text and "clamp" in text


def test_two_commands_run_here_with_the_noise_from_reruns(tmp_path, capsys):
    out = tmp_path / "diff.json"
    code = main(["diff", "--steps", "12", "--reruns", "1", "--json", str(out),
                 "--run", PROGRAM, "--run", f"{_clamped(tmp_path)}"])
    data = json.loads(out.read_text())
    assert code == 1, data["reason"]
    assert data["noise"]["source"] == "reruns" and data["noise"]["reruns"] == 1
    assert data["a"]["kind"] == "run" and data["a"]["steps"] == 12
    assert data["first_parted"]["change"]["line"] > 0


def test_the_example_pair_compares_the_fix_with_the_broken_example(tmp_path, capsys):
    html = tmp_path / "diff.html"
    code = main(["diff", "--example", "dqn-clamped-td", "--steps", "15", "--reruns", "1", "--html", str(html)])
    assert code == 1
    text = capsys.readouterr().out
    assert "A = dqn-huber" in text and "B = dqn-clamped-td" in text and "clamp" in text
    assert html.read_text().lstrip().lower().startswith("<!doctype html")


@pytest.mark.parametrize("argv, said", [
    (["diff", "only-one.json"], "compares two runs"),
    (["diff", "--example", "relu-mlp"], "no fixed twin"),
    (["diff", "--example", "no-such-example"], "no zoo example"),
])
def test_no_comparison_is_exit_2_with_the_reason(argv, said, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_a_file_that_is_not_a_report_is_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "leaky/fix-v1"}))
    missing = str(tmp_path / "missing.json")
    assert main(["diff", str(bad), str(bad)]) == 2
    assert "is not a leaky report" in capsys.readouterr().err
    assert main(["diff", missing, missing]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_a_script_that_never_steps_is_exit_2(tmp_path, capsys):
    script = tmp_path / "nostep.py"
    script.write_text("print('no training here')\n")
    out = tmp_path / "d.json"
    assert main(["diff", "--json", str(out), "--run", str(script), "--run", PROGRAM]) == 2
    data = json.loads(out.read_text())
    assert data["verdict"] == "unusable" and "no optimizer step" in data["reason"]


def test_two_stored_watch_runs(tmp_path, capsys):
    """`leaky watch` keeps each run's final report in its store; `leaky diff 1 latest` reads them."""
    store = str(tmp_path / "runs.db")
    for script in (PROGRAM, _clamped(tmp_path)):
        assert main(["watch", "--every", "2", "--store", store, "--fail-on", "never", script]) == 0
    capsys.readouterr()
    out = tmp_path / "d.json"
    assert main(["diff", "1", "latest", "--store", store, "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["a"]["kind"] == data["b"]["kind"] == "stored"
    assert data["a"]["steps"] == 160   # the whole script: 20 epochs of 8 batches
    assert data["first_parted"]["b"]["op"] == "clamp"
    assert main(["diff", "1", "3", "--store", store]) == 2
    assert "run" in capsys.readouterr().err


def test_two_copies_of_a_project_each_run_their_own_model_module(tmp_path, capsys):
    """`--run old/train.py --run new/train.py` in one process: each run imports its own
    folder's model.py (the first one's is forgotten after it), as two `python` runs would."""
    with open(PROGRAM, encoding="utf-8") as handle:
        text = handle.read()
    start, end = text.index("class Net"), text.index("model = Net()")
    train = "from model import Net\n" + text[:start] + text[end:]
    model = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nD, H, K = 16, 64, 4\n\n\n" \
        + text[start:end]
    for name, body in (("old", model), ("new", model.replace("F.gelu(self.fc2(h))", "torch.clamp(self.fc2(h), 0, 1)"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.py").write_text(body)
        (tmp_path / name / "train.py").write_text(train)
    out = tmp_path / "d.json"
    assert main(["diff", "--steps", "10", "--reruns", "1", "--json", str(out), "--run", str(tmp_path / "old" / "train.py"),
                 "--run", str(tmp_path / "new" / "train.py")]) == 1
    first = json.loads(out.read_text())["first_parted"]
    assert first["b"]["op"] == "clamp" and first["b"]["source"]["file"] == str(tmp_path / "new" / "model.py")


def test_the_python_api_compares_two_report_dicts(tmp_path, capsys):
    from leaky.diff import compare_reports

    a = json.loads(Path(_audit_json(tmp_path, "a", PROGRAM)).read_text())
    b = json.loads(Path(_audit_json(tmp_path, "b", _clamped(tmp_path))).read_text())
    assert compare_reports(a, a)["verdict"] == "same"
    result = compare_reports(a, b)
    assert result["verdict"] == "parted" and result["first_parted"]["b"]["op"] == "clamp"
    assert result["noise"]["source"] == "steps"
