"""The script's own failure is seen: its exit status and its traceback, as `python SCRIPT`
would end and print them, under `leaky audit`, `leaky watch` and `leaky fix`."""
from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from leaky.cli import main
from leaky.failure import describe_exception, failure_of, print_failure, script_traceback, strip_escapes
from tests.conftest import no_leaky_left

TRAIN = """
import sys
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(32, 8), torch.randn(32, 1)

def batch(step):
    if step == STEPS:
        END
    return x, y

STEPS = 4
for step in range(100):
    inputs, targets = batch(step)
    loss = ((model(inputs) - targets) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

CLAMPED_END = """
import sys
import torch
from torch import nn
torch.manual_seed(0)
q_net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(q_net.parameters(), lr=1e-3)
for step in range(12):
    s, a = torch.randn(64, 4), torch.randint(0, 2, (64,))
    q = q_net(s).gather(1, a[:, None]).squeeze(1)
    loss = torch.clamp(q - torch.randn(64) * 10, -1, 1).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
END
"""

# Fails before its first backward pass: a checkpoint that cannot be loaded, with a message
# of several lines and terminal escapes (as torch.load's weights_only message has).
EARLY = """
import torch

def load(path):
    try:
        return open(path, "rb")
    except FileNotFoundError as exc:
        raise RuntimeError("\\x1b[1mcould not load the checkpoint\\x1b[0m\\n"
                           "line two explains why\\nline three says what to do") from exc

model = torch.nn.Linear(4, 1)
state = load("/nonexistent/leaky-test/ckpt.pt")
model(torch.randn(2, 4)).sum().backward()
"""

ARGPARSE = """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()
torch.nn.Linear(2, 1)(torch.randn(3, 2)).sum().backward()
"""

# An error inside a torch function that leaky's function mode sees: the traceback must not
# show the detour through torch/overrides.py and leaky's mode.
IN_TORCH = """
import torch
import torch.nn.functional as F
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    logits = model(torch.randn(8, 4))
    probs = F.softmax(logits, dim=1 if step < 2 else 5)
    loss = probs.pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def _script(tmp_path, body: str, end: str = "pass", name: str = "train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).replace("END", end))
    return path


def _line(path, text: str) -> int:
    """The line number of the first line of the script holding `text`."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _leaky_frames(text: str) -> list[str]:
    package = str(Path(os.path.abspath(__file__)).parents[3]) + "/leaky/"
    return [line for line in text.splitlines() if package in line or "runpy" in line or "<frozen" in line]


# -- audit: exit statuses ------------------------------------------------------------------------
@pytest.mark.parametrize("end, status", [
    ("raise ValueError('bad batch')", 1),
    ("sys.exit(3)", 3),
    ("sys.exit(0)", 0),
    ("sys.exit()", 0),
    ("sys.exit('no data left: pass --data DIR')", 1),
    ("raise KeyboardInterrupt", 130),
])
def test_audit_ends_with_the_scripts_own_status(tmp_path, capsys, end, status):
    path = _script(tmp_path, TRAIN, end)
    report = tmp_path / "r.json"
    assert main(["audit", "--steps", "all", "--json", str(report), str(path)]) == status
    run = json.loads(report.read_text())["run"]
    assert run["steps"] == 4 and run["exit_status"] == status
    captured = capsys.readouterr()
    assert "4 steps observed" in captured.out
    if end.startswith("sys.exit('"):
        assert captured.err == "no data left: pass --data DIR\n"    # Python prints SystemExit's message
    elif status == 0 or end.startswith("sys.exit"):
        assert captured.err == ""
    assert no_leaky_left() == []


def test_a_script_stopped_by_leaky_after_its_steps_is_not_a_failure(tmp_path, capsys):
    path = _script(tmp_path, TRAIN, "raise ValueError('never reached')")
    report = tmp_path / "r.json"
    assert main(["audit", "--steps", "2", "--json", str(report), str(path)]) == 0
    run = json.loads(report.read_text())["run"]
    assert run["status"] == "stopped" and run["exit_status"] is None and run["error"] is None
    assert capsys.readouterr().err == ""


def test_the_scripts_status_wins_over_findings(tmp_path, capsys):
    path = _script(tmp_path, CLAMPED_END, "sys.exit(3)")
    report = tmp_path / "r.json"
    assert main(["audit", "--steps", "all", "--json", str(report), str(path)]) == 3
    assert any(f["severity"] == "error" for f in json.loads(report.read_text())["findings"])
    assert "LK106" in capsys.readouterr().out    # the findings are still reported


def test_findings_still_give_1_when_the_script_succeeds(tmp_path, capsys):
    path = _script(tmp_path, CLAMPED_END, "sys.exit(0)")
    assert main(["audit", "--steps", "all", str(path)]) == 1
    assert main(["audit", "--steps", "all", "--fail-on", "never", str(path)]) == 0


def test_a_crash_is_1_even_with_fail_on_never(tmp_path, capsys):
    path = _script(tmp_path, TRAIN, "raise ValueError('bad batch')")
    assert main(["audit", "--steps", "all", "--fail-on", "never", str(path)]) == 1


# -- audit: the traceback ----------------------------------------------------------------------
def test_the_traceback_is_the_scripts_own_after_the_report(tmp_path, capsys):
    path = _script(tmp_path, TRAIN, "raise ValueError('bad batch')")
    assert main(["audit", "--steps", "all", str(path)]) == 1
    captured = capsys.readouterr()
    assert "raised ValueError: bad batch (" in captured.out       # the one-line summary, below the report
    err = captured.err
    assert err.startswith("Traceback (most recent call last):\n")
    loop, raised = _line(path, "= batch(step)"), _line(path, "raise ValueError")
    assert f'File "{path}", line {loop}, in <module>\n    inputs, targets = batch(step)' in err
    assert f'File "{path}", line {raised}, in batch\n    raise ValueError(\'bad batch\')' in err
    assert err.endswith("ValueError: bad batch\n")
    assert _leaky_frames(err) == []


def test_json_on_stdout_stays_json_when_the_script_raises(tmp_path, capsys):
    path = _script(tmp_path, TRAIN, "raise ValueError('bad batch')")
    assert main(["audit", "--steps", "all", "--format", "json", str(path)]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["run"]["error"].startswith("ValueError: bad batch")
    assert "leaky: the script raised ValueError: bad batch" in captured.err
    assert captured.err.endswith("ValueError: bad batch\n")


@pytest.mark.parametrize("body", [IN_TORCH, EARLY], ids=["in-a-torch-function", "chained"])
def test_the_traceback_is_what_python_prints(tmp_path, body):
    """Run the script with `python` and with `leaky audit`: stderr is the same, but for
    leaky's own `leaky:` lines."""
    path = _script(tmp_path, body)
    env = {**os.environ, "LEAKY_STRICT": "1"}
    plain = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, cwd=tmp_path)
    audited = subprocess.run([sys.executable, "-m", "leaky", "audit", "--steps", "all", "--no-table", str(path)],
                             capture_output=True, text=True, env=env, cwd=tmp_path)
    assert audited.returncode == plain.returncode == 1
    own = "".join(line for line in audited.stderr.splitlines(keepends=True) if not line.startswith("leaky:"))
    # NOTE: Python itself keeps a message's terminal escapes; leaky strips them on a pipe.
    assert own == strip_escapes(plain.stderr)
    assert "Traceback (most recent call last)" in own


# -- audit and watch: a failure before the first backward pass ---------------------------------
def test_a_script_failing_before_its_first_backward_says_so(tmp_path, capsys):
    path = _script(tmp_path, EARLY)
    report = tmp_path / "r.json"
    assert main(["audit", "--json", str(report), str(path)]) == 1
    err = capsys.readouterr().err
    assert f"leaky: {path} raised RuntimeError: could not load the checkpoint (" in err
    assert "before its first backward pass; nothing to audit." in err
    assert "loss.backward()" not in err and "no backward pass was observed" not in err
    assert "\x1b" not in err                                         # not a terminal: escapes stripped
    assert "RuntimeError: could not load the checkpoint\nline two explains why\nline three says what to do\n" in err
    assert "The above exception was the direct cause of the following exception:" in err
    assert "FileNotFoundError" in err
    assert _leaky_frames(err) == []
    run = json.loads(report.read_text())["run"]
    assert run["status"] == "failed" and run["exit_status"] == 1 and "\x1b" not in run["error"]
    assert no_leaky_left() == []


def test_an_argparse_error_is_the_scripts_status_2_with_its_usage(tmp_path, capsys):
    path = _script(tmp_path, ARGPARSE)
    assert main(["audit", str(path)]) == 2
    err = capsys.readouterr().err
    assert "error: the following arguments are required: --lr" in err    # argparse's own message
    assert f"leaky: {path} exited with status 2 before its first backward pass; nothing to audit." in err
    assert "loss.backward()" not in err


def test_on_a_terminal_the_escapes_are_kept():
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    try:
        raise RuntimeError("\x1b[1mbold\x1b[0m")
    except RuntimeError as exc:
        failure = failure_of(exc)
    terminal, pipe = Terminal(), io.StringIO()
    print_failure(failure, terminal)
    print_failure(failure, pipe)
    assert terminal.getvalue().endswith("RuntimeError: \x1b[1mbold\x1b[0m\n")
    assert pipe.getvalue().endswith("RuntimeError: bold\n")
    assert failure.summary.startswith("RuntimeError: bold (")


@pytest.mark.parametrize("end, status, stored", [
    ("raise ValueError('bad batch')", 1, "ValueError: bad batch"),
    ("sys.exit(3)", 3, "SystemExit: 3"),
])
def test_watch_stores_the_run_as_failed_with_its_error(tmp_path, capsys, monkeypatch, end, status, stored):
    path = _script(tmp_path, TRAIN, end)
    store = tmp_path / "runs.db"
    monkeypatch.chdir(tmp_path)
    assert main(["watch", "--every", "2", "--store", str(store), str(path)]) == status
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT status, error FROM runs").fetchall()
    assert rows == [("failed", f"{stored} (train.py:{_line(path, end)})")]
    if status == 1:
        assert capsys.readouterr().err.endswith("ValueError: bad batch\n")


def test_watch_of_a_script_failing_before_its_first_backward(tmp_path, capsys):
    path = _script(tmp_path, EARLY)
    store = tmp_path / "runs.db"
    assert main(["watch", "--store", str(store), str(path)]) == 1
    err = capsys.readouterr().err
    assert "before its first backward pass; nothing to watch." in err and "line three says what to do" in err
    with sqlite3.connect(store) as db:
        ((status, error),) = db.execute("SELECT status, error FROM runs").fetchall()
    assert status == "failed" and error.startswith("RuntimeError: could not load the checkpoint")


# -- fix ---------------------------------------------------------------------------------------
def test_fix_of_a_script_failing_before_its_first_step(tmp_path, capsys):
    path = _script(tmp_path, EARLY)
    assert main(["fix", "--steps", "5", "--holdout", "2", str(path)]) == 1
    err = capsys.readouterr().err
    assert "raised RuntimeError: could not load the checkpoint" in err and "before its first optimizer step" in err
    assert err.endswith("line three says what to do\n") and _leaky_frames(err) == []


def test_fix_of_a_script_with_an_argparse_error_shows_its_usage(tmp_path, capsys):
    path = _script(tmp_path, ARGPARSE)
    assert main(["fix", "--steps", "5", "--holdout", "2", str(path)]) == 2
    err = capsys.readouterr().err
    assert "exited with status 2 before its first optimizer step" in err
    assert "the following arguments are required: --lr" in err


# -- the pieces ----------------------------------------------------------------------------------
@pytest.mark.parametrize("code, status", [(None, None), (0, None), (3, 3), (True, 1), ("message", 1),
                                          (256 + 4, 4 if os.name == "posix" else 260)])
def test_system_exit_ends_as_in_python(code, status):
    failure = failure_of(SystemExit(code))
    assert (failure.status if failure else None) == status
    if isinstance(code, str):
        assert failure.text == "message\n"


def test_chained_exceptions_keep_every_part_without_leaky_frames():
    def inner():
        raise KeyError("missing")
    try:
        try:
            inner()
        except KeyError:
            raise ValueError("while handling")
    except ValueError as exc:
        text = script_traceback(exc)
        summary = describe_exception(exc)
    assert "KeyError: 'missing'" in text and "During handling of the above exception" in text
    assert text.endswith("ValueError: while handling\n")
    assert summary.startswith("ValueError: while handling (") and "test_script_failure.py:" in summary


def test_strip_escapes_removes_terminal_sequences_only():
    assert strip_escapes("\x1b[1mbold\x1b[0m and \x1b[38;5;196mred\x1b[m, \x1b]8;;http://x\x07link\x1b]8;;\x07") \
        == "bold and red, link"
    assert strip_escapes("plain [not] (markup) 100%") == "plain [not] (markup) 100%"
