"""A parameter owned directly by a module that never runs itself is named as the script names it.

CleanRL's continuous PPO holds its policy in an `Agent` whose methods run `self.actor_mean(x)`
and `self.critic(x)`; `Agent.forward` never runs, and the log-std is the agent's own
`nn.Parameter`. The submodules are named through the variable that holds the agent
(`agent.actor_mean`); its own parameter was `<param (1, 1)>`, and LK108 left it out as part
of no model that ran, so a `.detach()` that starved it went unreported."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from leaky.cli import main

AGENT = """
import torch, torch.nn as nn
torch.manual_seed(0)


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.actor_mean = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
        self.critic = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
        self.actor_logstd = nn.Parameter(torch.zeros(1, 1))

    def evaluate(self, x, a):
        dist = torch.distributions.Normal(self.actor_mean(x), self.actor_logstd.exp())  # MARK: std
        return dist.log_prob(a).sum(1), self.critic(x).squeeze(1)


agent = Agent()
optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
for step in range(10):
    x = torch.randn(32, 3)
    logp, value = agent.evaluate(x, x[:, :1])
    loss = -logp.mean() + (value - x[:, 1]).pow(2).mean()
    optimizer.zero_grad(); loss.backward(); optimizer.step()
"""


def _audit(tmp_path: Path, text: str) -> tuple[dict, int, Path]:
    text = textwrap.dedent(text).lstrip("\n")
    script = tmp_path / "train.py"
    script.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "# MARK: std" in row)
    out = tmp_path / "report.json"
    main(["audit", "--steps", "5", "--no-table", "--json", str(out), str(script)])
    return json.loads(out.read_text()), line, script


def test_the_agents_own_parameter_is_named_by_the_agents_variable(tmp_path):
    report, _, _ = _audit(tmp_path, AGENT)
    names = [p["name"] for p in report["parameters"]]
    assert "agent.actor_logstd" in names and not any(name.startswith("<param") for name in names)
    assert [f for f in report["findings"] if f["severity"] in ("warning", "error")] == []


def test_a_detached_parameter_of_the_agent_is_found_at_its_cut(tmp_path):
    report, line, script = _audit(tmp_path, AGENT.replace("self.actor_logstd.exp()", "self.actor_logstd.detach().exp()"))
    (finding,) = [f for f in report["findings"] if f["code"] == "LK108"]
    assert finding["severity"] == "error" and finding["evidence"]["parameters"] == ["agent.actor_logstd"]
    assert finding["cause"] == {"file": str(script), "line": line, "what": "the gradient path cut here by .detach()"}
