"""The command line: script mode, exit codes, JSON, explain."""
from __future__ import annotations

import json
import warnings
import subprocess
import sys
import textwrap

import pytest

from leaky.checks import CHECKS
from leaky.cli import main
from tests.conftest import no_leaky_left

HEALTHY = """
import sys
import torch
from torch import nn
torch.manual_seed(0)
print("script argv:", sys.argv[1:])
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 30):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("script finished")
"""

CLAMPED = """
import torch
from torch import nn
torch.manual_seed(0)
q_net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(q_net.parameters(), lr=1e-3)
def main():
    for step in range(40):
        s, a = torch.randn(64, 4), torch.randint(0, 2, (64,))
        target = torch.randn(64) * 10
        q = q_net(s).gather(1, a[:, None]).squeeze(1)
        td = torch.clamp(q - target, -1, 1)  # THE-CLAMP
        loss = td.pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
if __name__ == "__main__":
    main()
"""


def _script(tmp_path, body: str, name: str = "train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_healthy_script_exits_0_and_keeps_its_output(tmp_path, capsys):
    path = _script(tmp_path, HEALTHY)
    assert main(["audit", "--steps", "5", str(path), "12"]) == 0
    out = capsys.readouterr().out
    assert "script argv: ['12']" in out
    assert "No leaks found" in out
    assert out.index("script argv") < out.index("leaky:")
    assert no_leaky_left() == []


def test_script_runs_to_its_end_with_steps_all(tmp_path, capsys):
    path = _script(tmp_path, HEALTHY)
    assert main(["audit", "--steps", "all", str(path), "7"]) == 0
    out = capsys.readouterr().out
    assert "script finished" in out
    assert "7 steps observed" in out


def test_broken_script_exits_1_and_points_at_the_clamp(tmp_path, capsys):
    path = _script(tmp_path, CLAMPED)
    report = tmp_path / "out.json"
    assert main(["audit", "--steps", "10", "--json", str(report), str(path)]) == 1
    data = json.loads(report.read_text())
    assert data["schema"] == "leaky/report-v1"
    zone = [f for f in data["findings"] if f["code"] == "LK106"]
    assert zone, data["findings"]
    line = CLAMPED.splitlines().index(next(l for l in CLAMPED.splitlines() if "THE-CLAMP" in l)) + 1
    assert zone[0]["source"] == {"file": str(path), "line": line}
    assert zone[0]["evidence"]["zeroed_share"] > 0.5
    assert "smooth_l1_loss" in zone[0]["fix"]
    assert "LK106" in capsys.readouterr().out


def test_fail_on_never_exits_0(tmp_path):
    path = _script(tmp_path, CLAMPED)
    assert main(["audit", "--steps", "5", "--fail-on", "never", str(path)]) == 0


@pytest.mark.parametrize("body, reason", [
    (None, "no such file"),
    ("def broken(:\n    pass\n", "syntax error at line 1"),
    ("import torch\nprint(torch.ones(2).sum())\n", "no backward pass was observed"),
])
def test_unusable_scripts_exit_2_with_one_line(tmp_path, capsys, body, reason):
    path = tmp_path / "train.py" if body is None else _script(tmp_path, body)
    assert main(["audit", str(path)]) == 2
    err = capsys.readouterr().err
    assert reason in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2  # rich may wrap one long line


@pytest.mark.parametrize("interpreter", [["python"], ["python3", "-u"], [sys.executable, "-W", "ignore"]])
def test_a_leading_python_is_dropped_with_a_line_saying_so(tmp_path, capsys, interpreter):
    """`leaky audit python train.py 12`, as people type it after `python train.py 12`: the
    script runs with its own arguments, and one line on stderr says what was left out."""
    path = _script(tmp_path, HEALTHY)
    assert main(["audit", "--steps", "5", "--", *interpreter, str(path), "12"]) == 0
    captured = capsys.readouterr()
    assert "script argv: ['12']" in captured.out and "No leaks found" in captured.out
    assert f"running {path} in leaky's own Python" in captured.err
    assert ("not applied" in captured.err) == (len(interpreter) > 1)
    assert no_leaky_left() == []


@pytest.mark.parametrize("words", [["python", "-m", "train"], ["python3", "-c", "print(1)"]])
def test_python_dash_m_or_dash_c_is_not_a_script_and_exits_2(capsys, words):
    assert main(["watch", *words]) == 2
    err = capsys.readouterr().err
    assert f"not `{' '.join(words)}`" in err and len(err.strip().splitlines()) == 1


def test_a_script_that_raises_is_reported_up_to_that_point_and_exits_1(tmp_path, capsys):
    body = HEALTHY.replace("print(\"script finished\")", "raise ValueError('bad batch')")
    path = _script(tmp_path, body)
    assert main(["audit", "--steps", "all", str(path), "4"]) == 1     # as `python train.py 4` would
    captured = capsys.readouterr()
    assert "4 steps observed" in captured.out
    assert "raised ValueError: bad batch" in captured.out
    assert "Traceback" not in captured.out
    assert captured.err.startswith("Traceback (most recent call last):")   # after the report, on stderr
    assert captured.err.rstrip().endswith("ValueError: bad batch")
    assert no_leaky_left() == []


def test_script_without_optimizer_counts_backward_calls(tmp_path, capsys):
    body = """
    import torch
    w = torch.randn(4, 4, requires_grad=True)
    for i in range(10):
        loss = (torch.randn(8, 4) @ w).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            w -= 0.01 * w.grad
            w.grad = None
    """
    path = _script(tmp_path, body)
    assert main(["audit", "--steps", "3", str(path)]) == 0
    assert "3 steps observed, 3 backward calls" in capsys.readouterr().out


def test_python_dash_m_leaky_runs(tmp_path):
    path = _script(tmp_path, HEALTHY)
    done = subprocess.run([sys.executable, "-m", "leaky", "audit", "--steps", "3", "--json", "-", str(path), "5"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert '"schema": "leaky/report-v1"' in done.stdout


@pytest.mark.parametrize("key", [c for check in CHECKS.values() for c in (check.code, check.name)])
def test_explain_prints_each_page(key, capsys):
    assert main(["explain", key]) == 0
    out = capsys.readouterr().out
    check = next(c for c in CHECKS.values() if key in (c.code, c.name))
    assert check.code in out and check.name in out
    for section in ("The math", "How to fix it"):
        assert section in out


def test_explain_unknown_check_exits_2(capsys):
    assert main(["explain", "LK999"]) == 2
    assert "known checks" in capsys.readouterr().err


def test_explain_without_argument_lists_all_checks(capsys):
    assert main(["explain"]) == 0
    out = capsys.readouterr().out
    assert all(code in out for code in CHECKS)


def test_a_script_calling_sys_exit_is_reported_and_exits_with_its_status(tmp_path, capsys):
    body = HEALTHY.replace('print("script finished")', "sys.exit(3)")
    path = _script(tmp_path, body)
    assert main(["audit", "--steps", "all", "--json", str(tmp_path / "r.json"), str(path), "4"]) == 3
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["run"]["status"] == "exited" and data["run"]["steps"] == 4
    assert data["run"]["exit_status"] == 3 and data["run"]["error"].startswith("SystemExit: 3")
    assert "exited with status 3 after 4 steps" in capsys.readouterr().out
    assert no_leaky_left() == []


def test_a_model_on_the_meta_device_is_a_one_line_error(tmp_path, capsys):
    path = _script(tmp_path, """
    import torch
    from torch import nn
    model = nn.Linear(4, 2, device="meta")
    for _ in range(3):
        model(torch.randn(8, 4, device="meta")).sum().backward()
    """)
    assert main(["audit", str(path)]) == 2
    err = capsys.readouterr().err
    assert "meta device" in err and len(err.strip().splitlines()) == 1


def test_a_binary_file_is_not_a_script(tmp_path, capsys):
    path = tmp_path / "weights.pt"
    path.write_bytes(b"\x80\x02\x00\x00binary")
    assert main(["audit", str(path)]) == 2
    assert "not a Python source file" in capsys.readouterr().err


def test_a_compiled_model_is_observed_with_one_note(tmp_path, capsys):
    path = _script(tmp_path, """
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = torch.compile(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(4):
        loss = model(torch.randn(16, 4)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    """)
    report = tmp_path / "r.json"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["audit", "--json", str(report), str(path)]) == 0
    assert not caught, [str(w.message) for w in caught]   # leaky stays out of compiled code: no torch warning
    err = capsys.readouterr().err
    assert sum("torch.compile'd" in line for line in err.splitlines()) == 1
    data = json.loads(report.read_text())
    assert {param["module"] for param in data["parameters"]} == {"0", "2"}   # names without _orig_mod


def test_sparse_gradients_are_measured(tmp_path):
    path = _script(tmp_path, """
    import torch
    from torch import nn
    emb = nn.Embedding(50, 8, sparse=True)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    for _ in range(3):
        loss = emb(torch.randint(0, 50, (16,))).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    """)
    report = tmp_path / "r.json"
    assert main(["audit", "--json", str(report), str(path)]) == 0
    (param,) = json.loads(report.read_text())["parameters"]
    assert param["grad_steps"] == 3 and param["grad_norm"] > 0


def test_ctrl_c_in_the_script_reports_and_leaves_nothing(tmp_path, capsys):
    body = HEALTHY.replace('print("script finished")', "raise KeyboardInterrupt")
    path = _script(tmp_path, body)
    report = tmp_path / "r.json"
    assert main(["audit", "--steps", "all", "--json", str(report), str(path), "3"]) == 130   # 128 + SIGINT
    assert json.loads(report.read_text())["run"]["status"] == "interrupted"
    assert capsys.readouterr().err.rstrip().endswith("KeyboardInterrupt")
    assert no_leaky_left() == []


def test_user_text_is_never_read_as_terminal_markup(tmp_path, capsys):
    path = _script(tmp_path, """
    import torch
    from torch import nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module("[bold red]evil[/]", nn.Linear(4, 4))
        def forward(self, x):
            return torch.clamp(getattr(self, "[bold red]evil[/]")(x) * 100, -1, 1)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for _ in range(5):
        loss = net(torch.randn(32, 4)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    """)
    main(["audit", str(path)])
    out = capsys.readouterr().out
    assert "[bold red]evil[/]" in out
