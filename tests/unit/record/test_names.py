"""Names a person can act on: every module named by the variable that holds it, unique in
a report and stable during a run; long names shortened from the middle in the terminal
only; `leaky runs` one line per run; every step number an optimizer step of the run."""
from __future__ import annotations

import copy
import io
import re
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from rich.console import Console
from torch import nn

import leaky
from leaky.derive import accumulate as fold
from leaky.report.format import distinct_width, shorten_middle
from leaky.report.runs import runs_table
from leaky.report.terminal import flow_table, render_text
from leaky.store import Store


def _render(renderable, width: int = 80) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False).print(renderable)
    return buffer.getvalue()


def _line_of(marker: str) -> int:
    with open(__file__) as source:
        return next(number for number, line in enumerate(source, 1) if line.rstrip().endswith(marker))


def _names_are_unique(report) -> None:
    modules = [row["module"] for row in report.modules]
    params = [row["name"] for row in report.parameters]
    assert len(set(modules)) == len(modules), modules
    assert len(set(params)) == len(params), params


# -- two roots held by one object ---------------------------------------------------------
class Agent(nn.Module):
    """CleanRL's PPO agent: two nn.Sequential run by methods, never by Agent.__call__."""

    def __init__(self) -> None:
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(4, 16), nn.ReLU(),  # critic-relu
                                    nn.Linear(16, 1))
        self.actor = nn.Sequential(nn.Linear(4, 16), nn.ReLU(),  # actor-relu
                                   nn.Linear(16, 2))
        with torch.no_grad():   # every hidden unit of both is dead from the start
            self.critic[0].bias.fill_(-100.0)
            self.actor[0].bias.fill_(-100.0)

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x):
        logits = self.actor(x)
        return logits, self.critic(x)


def test_two_roots_of_one_agent_are_named_by_its_variable_and_attributes():
    x, actions, returns = torch.randn(64, 4), torch.randint(0, 2, (64,)), torch.randn(64, 1)
    with leaky.audit(steps=6) as run:   # built inside, as `leaky audit train.py` sees it
        agent = Agent()
        opt = torch.optim.Adam(agent.parameters(), lr=1e-3)
        for _ in range(6):
            agent.get_value(x)   # the rollout's value estimate, then the update
            logits, value = agent.get_action_and_value(x)
            loss = F.cross_entropy(logits, actions) + F.mse_loss(value, returns)
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = run.report
    rows = {row["module"] for row in report.modules}
    assert {f"agent.{part}.{i}" for part in ("actor", "critic") for i in range(3)} <= rows, rows
    _names_are_unique(report)
    dead = {f.module: f for f in report.by_code("LK102")}
    assert set(dead) == {"agent.actor.1", "agent.critic.1"}, set(dead)
    assert dead["agent.actor.1"].source.line == _line_of("# actor-relu")
    assert dead["agent.critic.1"].source.line == _line_of("# critic-relu")
    assert "agent.actor.0.weight" in {row["name"] for row in report.parameters}


# -- a Q-network and its target network ----------------------------------------------------
def _dqn_loop(q_network, target_network, steps: int, target_from: int = 0) -> None:
    opt = torch.optim.Adam(q_network.parameters(), lr=1e-3)
    s, a, r, s2 = torch.randn(64, 4), torch.randint(0, 2, (64,)), torch.randn(64), torch.randn(64, 4)
    for step in range(steps):
        q = q_network(s).gather(1, a[:, None]).squeeze(1)
        target = r
        if step >= target_from:
            with torch.no_grad():
                target = r + 0.99 * target_network(s2).max(dim=1).values
        loss = F.mse_loss(q, target)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_a_q_network_and_its_target_network_are_prefixed_by_their_variables():
    q_network = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    target_network = copy.deepcopy(q_network)
    with leaky.audit(steps=5) as run:
        _dqn_loop(q_network, target_network, 5)
    report = run.report
    assert [row["module"] for row in report.modules if row["module"] != "<script>"] == \
        ["q_network.2", "q_network.1", "q_network.0"]
    params = {row["name"] for row in report.parameters}
    assert {"q_network.2.weight", "target_network.2.weight"} <= params, params
    _names_are_unique(report)


def test_names_handed_out_in_a_watch_do_not_change_when_a_second_model_appears(tmp_path):
    q_network = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    target_network = copy.deepcopy(q_network)
    with leaky.watch(every=1, store=tmp_path / "runs.db") as run:
        _dqn_loop(q_network, target_network, 25, target_from=15)   # check passes at 0, 10, 20
    with Store(tmp_path / "runs.db") as store:
        by_step = {}
        for row in store.module_stats(run.run_id):
            by_step.setdefault(row["step"], set()).add(row["module"])
    assert sorted(by_step) == [0, 10, 20]
    assert by_step[0] == by_step[10] == by_step[20] == {"<script>", "0", "1", "2"}
    params = {row["name"] for row in run.report.parameters}
    assert {"2.weight", "target_network.2.weight"} <= params, params
    _names_are_unique(run.report)


def test_one_model_keeps_its_short_names():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    loss_fn = nn.CrossEntropyLoss()   # a second root, without parameters: not a second model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    with leaky.audit(steps=3) as run:
        for _ in range(3):
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    modules = [row["module"] for row in run.report.modules]
    assert set(modules) == {"CrossEntropyLoss", "2", "1", "0"}, modules
    assert {row["name"] for row in run.report.parameters} == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_two_models_run_by_one_loop_variable_are_named_by_their_list():
    nets = [nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)) for _ in range(2)]
    opt = torch.optim.SGD([p for net in nets for p in net.parameters()], lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with leaky.audit(steps=3) as run:
        for _ in range(3):
            loss = sum(F.mse_loss(net(x), y) for net in nets)
            opt.zero_grad()
            loss.backward()
            opt.step()
    modules = {row["module"] for row in run.report.modules}
    assert {"nets[0].0", "nets[1].0"} <= modules and not any(m.startswith("net.") for m in modules), modules
    assert {"nets[0].0.weight", "nets[1].2.bias"} <= {row["name"] for row in run.report.parameters}
    _names_are_unique(run.report)


def test_two_models_that_only_a_loop_variable_names_get_distinct_names():
    pair = SimpleNamespace(a=nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)),
                           b=nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))
    opt = torch.optim.SGD([*pair.a.parameters(), *pair.b.parameters()], lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with leaky.audit(steps=3) as run:
        for _ in range(3):
            loss = sum(F.mse_loss(net(x), y) for net in (pair.a, pair.b))
            opt.zero_grad()
            loss.backward()
            opt.step()
    modules = {row["module"] for row in run.report.modules}
    assert {"net.0", "net#2.0"} <= modules, modules
    _names_are_unique(run.report)


# -- long names in the terminal ------------------------------------------------------------
def test_shorten_middle_keeps_the_distinguishing_tail():
    assert shorten_middle("transformer.h.3.mlp.c_fc", 14) == "t…h.3.mlp.c_fc"
    assert shorten_middle("transformer.h.3.mlp.c_fc", 40) == "transformer.h.3.mlp.c_fc"
    assert shorten_middle("agent.critic.4", 10) == "a…critic.4"
    for width in range(3, 30):
        short = shorten_middle("transformer.h.11.attn.c_attn", width)
        assert len(short) <= width and short.endswith("c_attn"[-min(6, width - 2):])
    names = [f"transformer.h.{i}.{part}" for i in range(12) for part in ("mlp.c_fc", "mlp.c_proj", "attn.c_attn")]
    width = distinct_width(names)
    assert len({shorten_middle(n, width) for n in names}) == len(names)
    assert len({shorten_middle(n, width - 1) for n in names}) < len(names)


def _gpt_rows() -> list[dict]:
    parts = (("mlp.c_proj", "Linear"), ("mlp.gelu", "GELU"), ("mlp.c_fc", "Linear"), ("ln_2", "LayerNorm"),
             ("attn.c_proj", "Linear"), ("attn.c_attn", "Linear"), ("attn", "CausalSelfAttention"),
             ("ln_1", "LayerNorm"))
    rows = [{"module": f"transformer.h.{i}.{part}", "type": kind} for i in (11, 10, 3, 1) for part, kind in parts]
    rows.append({"module": "transformer.wte", "type": "Embedding"})
    return [{**row, "grad_norm": 0.0123, "gain": 1.04, "zeroed_share": None, "dead_share": None,
             "saturated_share": 0.01} for row in rows]


def test_the_flow_table_at_80_columns_tells_every_nanogpt_layer_apart():
    rows = _gpt_rows()
    text = _render(flow_table(SimpleNamespace(modules=rows)), width=80)
    lines = [line for line in text.splitlines() if "│" in line]
    assert len(lines) == len(rows) and all(len(line) <= 80 for line in text.splitlines())
    shown = [line.split("│")[0].strip() for line in lines]
    assert len(set(shown)) == len(rows), shown
    assert "t…h.3.mlp.c_fc" in shown and "transformer.wte" in shown
    assert _render(flow_table(SimpleNamespace(modules=rows)), width=200).count("transformer.h.3.mlp.c_fc") == 1


class TinyGPT(nn.Module):
    """nanoGPT's module tree, small: transformer.h.N.mlp.c_fc and friends."""

    def __init__(self, layers: int = 12, width: int = 8) -> None:
        super().__init__()
        block = lambda: nn.ModuleDict({"mlp": nn.ModuleDict(  # noqa: E731
            {"c_fc": nn.Linear(width, 2 * width), "gelu": nn.GELU(), "c_proj": nn.Linear(2 * width, width)})})
        self.transformer = nn.ModuleDict({"wte": nn.Embedding(16, width),
                                          "h": nn.ModuleList(block() for _ in range(layers))})
        self.lm_head = nn.Linear(width, 16)

    def forward(self, idx):
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            mlp = block.mlp
            x = x + mlp.c_proj(mlp.gelu(mlp.c_fc(x)))
        return self.lm_head(x)


def test_a_real_report_is_shortened_in_the_terminal_only():
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 16, (4, 6))
    with leaky.audit(steps=2) as run:
        for _ in range(2):
            loss = F.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = run.report
    text = render_text(report, width=80)
    table = [line.split("│")[0].strip() for line in text.split("gradient flow")[1].splitlines() if "│" in line]
    assert len(table) == len(report.modules) and len(set(table)) == len(table), table
    assert "t…h.3.mlp.c_fc" in table and "transformer.h.3.mlp.c_fc" not in text
    assert "transformer.h.3.mlp.c_fc" in {row["module"] for row in report.to_dict()["modules"]}
    from leaky.report.html import render_html

    assert "transformer.h.11.mlp.c_proj" in render_html(report.to_dict(), None)
    _names_are_unique(report)


def test_a_table_that_fits_is_left_as_it_is():
    rows = [{**row, "module": row["module"].replace("transformer.h.", "h")} for row in _gpt_rows()[:8]]
    text = _render(flow_table(SimpleNamespace(modules=rows)), width=100)
    assert "…" not in text and "h11.mlp.c_proj" in text


# -- leaky runs ----------------------------------------------------------------------------
NANOGPT_ARGV = ("config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 --log_interval=1 "
                "--block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 "
                "--lr_decay_iters=2000 --dropout=0.0").split()


def test_leaky_runs_shows_one_line_per_run_at_80_columns():
    runs = [{"id": i, "started": time.time(), "status": "finished", "steps": 2000, "findings": 3, "errors": 1,
             "last_loss": 1.234, "script": "/home/me/nanoGPT/train.py", "argv": NANOGPT_ARGV} for i in (2, 1)]
    for width in (80, 120):
        text = _render(runs_table(runs, "leaky-runs.db"), width=width)
        lines = [line for line in text.splitlines() if "│" in line]
        assert len(lines) == 2, text
        assert all("train.py config/" in line and line.rstrip().endswith("…") for line in lines), text
        assert all(len(line) <= width for line in text.splitlines())
    wide = _render(runs_table(runs, "leaky-runs.db"), width=400)
    assert "--dropout=0.0" in wide and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", wide)


# -- watch step numbers --------------------------------------------------------------------
KILL_AT = 45   # the optimizer step whose forward first sees the killed units


def _kill_units_at(steps: int, kill_at: int) -> nn.Module:
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 8), torch.randn(256, 1)
    for step in range(steps):
        if step == kill_at:
            with torch.no_grad():
                model[0].bias[:48] -= 100.0
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def test_a_watch_reports_when_units_died_in_optimizer_steps():
    announced = []
    with leaky.Watch(every=10, on_finding=lambda f, step: announced.append((step, f))) as run:
        _kill_units_at(120, KILL_AT)
    (finding,) = [f for f in run.report.findings if f.code == "LK102"]
    # observed at steps 40 (the units fired) and 50 (silent): they died at a step in 41..50
    assert finding.evidence["died_between_steps"] == [41, 50]
    assert finding.step == 41 <= KILL_AT <= 50
    assert "died between steps 41 and 50" in finding.message
    assert "fired at observed step 40 and were silent at observed step 50" in finding.message
    assert finding.to_dict()["step"] == 41
    step, first = next((s, f) for s, f in announced if f.code == "LK102")
    assert first.step == 41 and 50 <= step < 120


def test_an_audit_still_names_the_exact_step_units_died():
    with leaky.audit(steps=60) as run:
        _kill_units_at(60, KILL_AT)
    (finding,) = [f for f in run.report.findings if f.code == "LK102"]
    assert finding.step == KILL_AT and f"died at step {KILL_AT}." in finding.message
    assert finding.evidence["died_between_steps"] == [KILL_AT, KILL_AT]


def test_a_gradient_spike_is_reported_at_its_optimizer_step_after_a_long_run(monkeypatch):
    monkeypatch.setattr(fold, "SERIES_LIMIT", 50)   # the run outlives the series kept in memory
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    with leaky.watch(every=10) as run:
        for step in range(120):
            loss = F.mse_loss(model(x), y) * (1e5 if step == 100 else 1.0)
            opt.zero_grad()
            loss.backward()
            opt.step()
    (spike,) = [f for f in run.report.findings if f.code == "LK104"]
    assert spike.step == 100 and spike.message.startswith("at step 100 ")


def test_a_finding_first_seen_at_the_end_of_a_watch_is_stored_at_the_last_step(tmp_path):
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    announced = []
    with leaky.Watch(every=1, store=tmp_path / "runs.db", on_finding=lambda f, s: announced.append((s, f))) as run:
        for step in range(5):   # check passes at step 0, then only at the end
            loss = model(torch.randn(8, 4)).pow(2).mean() * (float("nan") if step == 3 else 1.0)
            opt.zero_grad()
            loss.backward()
            opt.step()
    steps = [s for s, f in announced if f.code == "LK107"]
    assert steps == [4]
    with Store(tmp_path / "runs.db") as store:
        assert max(row["step"] for row in store.steps(run.run_id)) == 4
        assert {f["first_step"] for f in store.findings(run.run_id) if f["code"] == "LK107"} == {4}


def test_tensors_no_module_owns_get_distinct_names():
    w1, w2 = nn.Parameter(torch.randn(4, 4)), nn.Parameter(torch.randn(4, 4))
    opt = torch.optim.SGD([w1, w2], lr=0.1)
    with leaky.audit(steps=3) as run:
        for _ in range(3):
            loss = (torch.randn(8, 4) @ w1 @ w2).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert [row["name"] for row in run.report.parameters] == ["<param (4, 4)>", "<param (4, 4)>#2"]


# -- a list of names cut short says so ------------------------------------------------------
class FiveLayers(nn.Module):
    """pytorch/examples vae's five Linear layers, held by one optimizer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(12, 16), nn.Linear(16, 4), nn.Linear(16, 4)
        self.fc3, self.fc4 = nn.Linear(4, 16), nn.Linear(16, 12)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        z = self.fc21(h) + torch.randn(x.shape[0], 4) * torch.exp(0.5 * self.fc22(h))
        return self.fc4(F.relu(self.fc3(z)))


def test_an_optimizer_over_five_layers_is_not_named_as_over_four():
    """A forgotten zero_grad() under the VAE's Adam: LK203 said 'for optimizer #1 (over fc1,
    fc21, fc22, fc3)' of an optimizer that holds fc4 too. A list cut short says how much it
    left out."""
    torch.manual_seed(0)
    model = FiveLayers()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with leaky.audit(steps=8) as audit:
        for _ in range(8):
            x = torch.rand(16, 12)
            F.mse_loss(model(x), x).backward()   # no zero_grad() anywhere
            opt.step()
    found = [f for f in audit.report.findings if f.code == "LK203"]
    assert len(found) == 1
    assert found[0].evidence["modules"] == ["fc1", "fc21", "fc22", "fc3", "fc4"]
    assert "(over fc1, fc21, fc22, fc3 and 1 more)" in found[0].message
