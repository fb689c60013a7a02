"""`leaky audit` and `leaky watch --every 1` over the same steps reach the same verdict.

A watch is an audit that samples: at `--every 1` it observes every step in detail, so it
must run every check the audit runs, the one-time probes included (LK306's batch probe, the
gradcheck of custom autograd.Functions, the first loss, the raw inputs), on its first
sampled step. Every built-in example, broken and healthy, is run as a script through both
commands (the CLI itself, as a CI gate would call it): the same findings (code, severity,
module, line) and the same exit status.
"""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import leaky
from leaky.cli import main
from leaky.zoo import EXAMPLES
from tests.conftest import no_leaky_left

STEPS = 20   # `leaky audit`'s default window: the example runs exactly these steps under both


def _verdict(path) -> set[tuple]:
    findings = json.loads(path.read_text())["findings"]
    return {(f["code"], f["severity"], f["module"], (f["source"] or {}).get("line")) for f in findings}




@pytest.mark.filterwarnings("ignore::UserWarning")   # torch's own warnings to the examples (shown at their line)
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_audit_and_watch_every_1_agree_on_every_example(name, tmp_path, capsys):
    script = tmp_path / "example.py"
    script.write_text(f"from leaky.zoo import get\nget({name!r}).run(steps={STEPS}, seed=0)\n")
    audit_status = main(["audit", "--no-table", "--steps", str(STEPS), "--json", str(tmp_path / "audit.json"),
                         str(script)])
    watch_status = main(["watch", "--every", "1", "--no-table", "--store", str(tmp_path / "runs.db"),
                         "--json", str(tmp_path / "watch.json"), str(script)])
    audited, watched = _verdict(tmp_path / "audit.json"), _verdict(tmp_path / "watch.json")
    assert audited == watched, (f"audit only: {sorted(audited - watched, key=str)}; "
                                f"watch only: {sorted(watched - audited, key=str)}")
    assert audit_status == watch_status


# -- the char-level GRU fed x.view(T, B, E) where a transpose was meant ---------------------
CHAR_GRU = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
text = "the quick brown fox jumps over the lazy dog. " * 20
chars = sorted(set(text))
stoi = {{c: i for i, c in enumerate(chars)}}
data = torch.tensor([stoi[c] for c in text])
V, E, H, T, B = len(chars), 16, 32, 12, 8


class CharGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, E)
        self.gru = nn.GRU(E, H)              # time-major: (T, B, E)
        self.head = nn.Linear(H, V)

    def forward(self, idx):                  # idx: (B, T)
        x = self.embed(idx)                  # (B, T, E)
        x = {reorder}
        out, _ = self.gru(x)
        return self.head(out)                # (T, B, V)


model = CharGRU()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(8):
    starts = torch.randint(0, len(data) - T - 1, (B,))
    xb = torch.stack([data[s:s + T] for s in starts])
    yb = torch.stack([data[s + 1:s + T + 1] for s in starts])
    loss = F.cross_entropy(model(xb).reshape(-1, V), yb.t().reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("every", ["1", "100"])
def test_watch_finds_the_char_gru_fed_a_view_for_a_transpose(every, tmp_path, capsys):
    script = tmp_path / "char_gru.py"
    script.write_text(CHAR_GRU.format(reorder="x.view(T, B, E)"))
    status = main(["watch", "--every", every, "--no-table", "--store", str(tmp_path / "runs.db"),
                   "--json", str(tmp_path / "watch.json"), str(script)])
    found = [f for f in json.loads((tmp_path / "watch.json").read_text())["findings"] if f["code"] == "LK306"]
    assert status == 1
    line = next(n for n, text in enumerate(script.read_text().splitlines(), 1) if "x.view(T, B, E)" in text)
    assert [(f["severity"], f["source"]["line"]) for f in found] == [("error", line)]
    assert "LK306" in capsys.readouterr().out


def test_watch_is_quiet_on_the_char_gru_fed_its_transpose(tmp_path, capsys):
    script = tmp_path / "char_gru.py"
    script.write_text(CHAR_GRU.format(reorder="x.transpose(0, 1)"))
    status = main(["watch", "--every", "1", "--no-table", "--store", str(tmp_path / "runs.db"),
                   "--json", str(tmp_path / "watch.json"), str(script)])
    report = json.loads((tmp_path / "watch.json").read_text())
    assert status == 0
    assert [f["code"] for f in report["findings"] if f["severity"] != "info"] == []
    assert report["batch_probes"] and report["batch_probes"][0]["judged"] and not report["batch_probes"][0]["mixed"]


# -- in a watch, the probe runs once and changes nothing ------------------------------------
FORWARDS: list[int] = []   # outside the model: the probe puts back what forward writes on it


class NormDropGRU(nn.Module):
    """Batch norm (running statistics), dropout (the random stream) and a time-major GRU."""

    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.2)
        self.gru = nn.GRU(6, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):                    # x: (B, T, 6)
        FORWARDS.append(x.shape[0])
        x = self.drop(self.norm(x.transpose(1, 2)).transpose(1, 2))
        out, _ = self.gru(x.transpose(0, 1))
        return self.head(out[-1])


def _train(model, steps: int) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 5, 6), torch.randint(0, 3, (8,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    return losses


@pytest.mark.parametrize("every", [1, 3])
def test_the_watchs_probe_runs_once_and_leaves_training_bit_identical(every):
    def run(watched):
        torch.manual_seed(3)
        model = NormDropGRU()
        FORWARDS.clear()
        if not watched:
            return _train(model, 7), model, torch.rand(1), None
        with leaky.watch(every=every) as run_:
            losses = _train(model, 7)
        return losses, model, torch.rand(1), run_

    plain_losses, plain_model, plain_next, _ = run(False)
    plain_forwards = len(FORWARDS)
    seen_losses, seen_model, seen_next, watch = run(True)
    (probe,) = watch.report.batch_probes
    assert probe["judged"] and not probe["mixed"]
    assert len(FORWARDS) == plain_forwards + 1   # one probe forward, after the first step only
    assert all(torch.equal(a, b) for a, b in zip(plain_losses, seen_losses))
    plain_state, seen_state = plain_model.state_dict(), seen_model.state_dict()
    assert all(torch.equal(plain_state[k], seen_state[k]) for k in plain_state)
    assert torch.equal(plain_next, seen_next)   # the random stream goes on where it would have
    assert no_leaky_left() == []
