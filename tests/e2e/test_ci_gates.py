"""CI gates: SARIF output for code scanning, and assert_gradient_flow for users' suites."""
from __future__ import annotations

import json
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from leaky.checks import CHECKS
from leaky.cli import main
from leaky.testing import assert_gradient_flow

DQN = """
import torch
from torch import nn
torch.manual_seed(0)
q_net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(q_net.parameters(), lr=1e-3)
for step in range(30):
    s, a = torch.randn(64, 4), torch.randint(0, 2, (64,))
    target = torch.randn(64) * 10
    q = q_net(s).gather(1, a[:, None]).squeeze(1)
    td = torch.clamp(q - target, -1, 1)
    loss = td.pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_sarif_has_rules_results_and_the_offending_line(tmp_path, capsys):
    script = tmp_path / "dqn.py"
    script.write_text(textwrap.dedent(DQN))
    out = tmp_path / "leaky.sarif"
    assert main(["audit", "--format", "sarif", "--output", str(out), str(script)]) == 1
    sarif = json.loads(out.read_text())
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} == set(CHECKS)
    assert all("## The math" in r["help"]["markdown"] for r in rules)
    (result,) = [r for r in run["results"] if r["ruleId"] == "LK106"]
    assert result["level"] == "error" and rules[result["ruleIndex"]]["id"] == "LK106"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "dqn.py"
    assert location["region"]["startLine"] == DQN.splitlines().index(
        "    td = torch.clamp(q - target, -1, 1)") + 1


def test_json_on_stdout_is_not_mixed_with_the_scripts_prints(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("print('hello from the script')\n" + textwrap.dedent(DQN))
    main(["audit", "--format", "json", str(script)])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["schema"] == "leaky/report-v1"
    assert "hello from the script" in captured.err


def _mlp(scale=1.0):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Sigmoid(), nn.Linear(32, 3))
    with torch.no_grad():
        model[0].weight.mul_(scale)
    return model


def test_assert_gradient_flow_passes_a_healthy_model_and_keeps_grads():
    model = _mlp()
    batch = (torch.randn(64, 8), torch.randint(0, 3, (64,)))
    findings = assert_gradient_flow(model, batch, F.cross_entropy)
    assert all(f.severity.value == "info" for f in findings)
    assert all(p.grad is None for p in model.parameters())


def test_assert_gradient_flow_fails_with_the_findings_and_accepts_by_name():
    model = _mlp(scale=60.0)
    batch = (torch.randn(64, 8) * 3, torch.randint(0, 3, (64,)))
    with pytest.raises(AssertionError, match="LK101 saturated-activation"):
        assert_gradient_flow(model, batch, F.cross_entropy)
    accepted = ["saturated-activation", "LK302", "unnormalized-input", "vanishing-gradient"]
    assert_gradient_flow(model, batch, F.cross_entropy, accept=accepted)


def test_assert_gradient_flow_with_an_optimizer_runs_steps():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with pytest.raises(AssertionError, match="stale-parameter"):
        assert_gradient_flow(model, (torch.randn(32, 8), torch.randint(0, 3, (32,))), F.cross_entropy,
                             optimizer=opt, steps=3)
