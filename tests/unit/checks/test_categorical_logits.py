"""A softmax before torch.distributions.Categorical(logits=...) normalises twice (LK301).

Categorical(logits=z) takes log p = z − logsumexp(z), as cross_entropy does: fed a softmax's
output, the scores lie in [0, 1], and over 2 actions the policy can never put more than
e / (e + 1) = 0.73 on one (CleanRL's ppo.py with `torch.softmax(self.actor(x), dim=-1)` as
its logits: the scores stayed in [0.397, 0.603]). Raw logits, or the probabilities given as
probs=, are right and stay quiet."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from leaky.cli import main

POLICY = """
import torch, torch.nn as nn
from torch.distributions import Categorical
torch.manual_seed(0)
actor = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
optimizer = torch.optim.Adam(actor.parameters(), lr=1e-2)
for step in range(30):
    obs = torch.randn(64, 4)
    probs = DISTRIBUTION  # MARK: policy
    action = probs.sample()
    reward = (action == (obs[:, 0] > 0).long()).float()   # act 1 when the first feature is positive
    loss = -(probs.log_prob(action) * (reward - reward.mean())).mean()
    optimizer.zero_grad(); loss.backward(); optimizer.step()
"""


def _audit(tmp_path: Path, distribution: str) -> tuple[dict, int]:
    text = textwrap.dedent(POLICY).lstrip("\n").replace("DISTRIBUTION", distribution)
    script = tmp_path / "train.py"
    script.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "# MARK: policy" in row)
    out = tmp_path / "report.json"
    main(["audit", "--no-table", "--json", str(out), str(script)])
    return json.loads(out.read_text()), line


def test_a_softmax_before_categorical_logits_is_normalised_twice(tmp_path):
    report, line = _audit(tmp_path, "Categorical(logits=torch.softmax(actor(obs), dim=-1))")
    (finding,) = [f for f in report["findings"] if f["code"] == "LK301"]
    assert finding["severity"] == "error" and finding["source"]["line"] == line
    assert finding["evidence"]["loss"] == "logsumexp" and finding["evidence"]["input_range"][1] <= 1


@pytest.mark.parametrize("distribution", ["Categorical(logits=actor(obs))",
                                          "Categorical(probs=torch.softmax(actor(obs), dim=-1))"])
def test_raw_logits_or_probs_given_as_probs_are_quiet(tmp_path, distribution):
    report, _ = _audit(tmp_path, distribution)
    assert [f["code"] for f in report["findings"] if f["severity"] in ("warning", "error")] == []
