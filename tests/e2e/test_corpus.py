"""The corpus: training programs written in the idioms of public code (tests/corpus/), run
unmodified under `leaky audit --steps all` and `leaky watch`.

Each healthy program gets no warning and no error, and exits 0. Each mutated copy (one
typical bug put into one line) gets the right finding, at warning or error, at that line
(its `source`, or the `cause` that names the line to change) and, where it says, in the
right module. These are the idioms where leaky once raised false alarms: LBFGS with a
closure, a GAN with two optimizers, a DQN whose target network is synced every N steps, a
bigram that learns slowly, an actor and a critic held by one agent, a DataLoader with
workers, warm restarts, Lightning, the Hugging Face Trainer. (A compiled model is in
tests/unit/record/test_compile.py.)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from leaky.cli import main

CORPUS = Path(__file__).parents[1] / "corpus"
ALARM = ("warning", "error")


def _run(command: str, script: Path, tmp_path: Path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / f"{script.stem}-{command}.json"
    store = ["--store", str(tmp_path / "runs.db"), "--every", "10"] if command == "watch" else ["--steps", "all"]
    rc = main([command, *store, "--no-table", "--json", str(out), str(script), *extra])
    return rc, json.loads(out.read_text())


def _alarms(report: dict) -> list[str]:
    return [f"{f['code']} {f['module']} {f['message']}" for f in report["findings"] if f["severity"] in ALARM]


HEALTHY = ["lbfgs_closure.py", "gan_two_optimizers.py", "dqn_target_network.py", "bigram_slow.py",
           "actor_critic_one_agent.py", "dataloader_workers.py", "warm_restarts.py", "manual_sgd_lstm.py",
           "lightning_classifier.py",
           "hf_trainer_gpt2.py", "scheduler_per_batch.py",
           "layer_local.py", "seq2seq_one_pair.py", "char_gru_time_major.py", "masked_attention.py",
           "policy_collapse.py", "ppo_minibatch_epochs.py"]
# the frameworks a program needs (installed with leaky[integrations], as CI does)
NEEDS = {"lightning_classifier.py": "lightning", "hf_trainer_gpt2.py": "transformers"}


def _needs(name: str) -> None:
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])


@pytest.mark.parametrize("name", HEALTHY)
@pytest.mark.parametrize("command", ["audit", "watch"])
def test_healthy_programs_get_no_warning(name, command, tmp_path, capsys):
    _needs(name)
    rc, report = _run(command, CORPUS / name, tmp_path)
    assert _alarms(report) == [], capsys.readouterr().err
    assert rc == 0
    assert report["run"]["internal_error"] is None


@dataclass(frozen=True)
class Mutation:
    script: str
    old: str            # text on one line of the healthy program
    new: str            # what it becomes
    code: str           # the finding that must name the new line
    module: str | None = None   # ... and, if given, the module it must name (or one below it)


MUTATIONS = [
    Mutation("lbfgs_closure.py", "h = torch.tanh(self.hidden(x))", "h = torch.tanh(self.hidden(x)).detach()",
             "LK108", "hidden"),
    Mutation("gan_two_optimizers.py",
             "netD = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 64), nn.LeakyReLU(0.2), "
             "nn.Linear(64, 1))",
             "netD = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 64), nn.LeakyReLU(0.2), "
             "nn.Linear(64, 1), nn.Sigmoid())", "LK301", "netD"),
    Mutation("dqn_target_network.py", "loss = F.mse_loss(td_target, old_val)",
             "loss = torch.clamp(td_target - old_val, -1, 1).pow(2).mean()", "LK106"),
    Mutation("bigram_slow.py", "AdamW(model.parameters(), lr=args.learning_rate,",
             "AdamW(model.parameters(), lr=1e-8,", "LK204", "Bigram"),
    Mutation("actor_critic_one_agent.py",
             "return action, probs.log_prob(action), probs.entropy(), self.critic(x)",
             "return action, probs.log_prob(action), probs.entropy(), self.critic(x).detach()",
             "LK108", "agent.critic"),
    Mutation("dataloader_workers.py", "return self.fc3(x)", "return F.softmax(self.fc3(x), dim=1)", "LK301"),
    Mutation("warm_restarts.py", "optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)",
             "optimizer = torch.optim.SGD(model.parameters(), lr=20.0, momentum=0.9)", "LK202"),
    Mutation("lightning_classifier.py", "nn.ReLU(), nn.Linear(128, 10))", "nn.ReLU(), nn.Linear(128, 10), nn.ReLU())",
             "LK301", "backbone"),
    Mutation("hf_trainer_gpt2.py", "loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),",
             "loss = F.cross_entropy(logits[:, :-1].softmax(-1).reshape(-1, logits.size(-1)),", "LK301"),
    Mutation("scheduler_per_batch.py", "        optimizer.step()", "        optimizer.step(); scheduler.step()", "LK202"),
    # a layer trained alone with a far too high rate kills its own units (judged on its own steps)
    Mutation("layer_local.py", "self.opt = torch.optim.Adam(self.parameters(), lr=args.lr)",
             "self.opt = torch.optim.Adam(self.parameters(), lr=args.lr * 100)", "LK102"),
    # a padding mask of the wrong polarity hides every real token: whole rows are -inf
    Mutation("masked_attention.py", "pad = tokens == PAD", "pad = tokens != PAD", "LK107"),
    # a `view` where a transpose was meant scatters the batch over time
    Mutation("char_gru_time_major.py", "e = e.transpose(0, 1)  ", "e = e.view(args.seq, args.batch, -1)", "LK306",
             "CharGRU"),
    # a learning rate 30x too high: the policy collapses onto one action while the episodes stay short
    Mutation("policy_collapse.py", "optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)",
             "optimizer = torch.optim.Adam(model.parameters(), lr=0.1)", "LK101"),
]


def _mutate(mutation: Mutation, tmp_path: Path) -> tuple[Path, int]:
    lines = (CORPUS / mutation.script).read_text().splitlines()
    hits = [i for i, text in enumerate(lines) if mutation.old in text]
    assert len(hits) == 1, f"{mutation.old!r} is not on one line of {mutation.script}"
    lines[hits[0]] = lines[hits[0]].replace(mutation.old, mutation.new)
    path = tmp_path / mutation.script
    path.write_text("\n".join(lines) + "\n")
    for helper in CORPUS.glob("*_env.py"):   # what the programs import from beside them (balance_env)
        (tmp_path / helper.name).write_text(helper.read_text())
    return path, hits[0] + 1


def _lines_named(finding: dict) -> set[int]:
    places = [finding.get("source"), finding.get("cause")]
    return {place["line"] for place in places if place}


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: f"{m.script}:{m.code}")
def test_each_mutation_is_found_at_its_line(mutation, tmp_path, capsys):
    _needs(mutation.script)
    path, line = _mutate(mutation, tmp_path)
    _, report = _run("audit", path, tmp_path)
    hits = [f for f in report["findings"] if f["code"] == mutation.code and f["severity"] in ALARM]
    found = [(f["code"], f["severity"], f["module"], f.get("source")) for f in report["findings"]]
    assert hits, f"no {mutation.code} in {found}"
    at_line = [f for f in hits if line in _lines_named(f)]
    assert at_line, f"{mutation.code} not at line {line}: {found}"
    if mutation.module is not None:
        assert any(f["module"] and (f["module"] == mutation.module or f["module"].startswith(mutation.module + "."))
                   for f in at_line), found


def test_two_models_held_by_one_agent_are_named_apart(tmp_path):
    _, report = _run("audit", CORPUS / "actor_critic_one_agent.py", tmp_path)
    names = [row["module"] for row in report["modules"]]
    assert len(names) == len(set(names))
    assert {"agent.actor.4", "agent.critic.4", "agent.actor.0", "agent.critic.0"} <= set(names)


def test_a_time_major_batch_is_named_by_its_own_size(tmp_path):
    """B = 16, T = 32: the batch that a `view` mixes is the 16 samples, not the 32 steps."""
    path, _ = _mutate(next(m for m in MUTATIONS if m.script == "char_gru_time_major.py"), tmp_path)
    _, report = _run("audit", path, tmp_path)
    (probe,) = report["batch_probes"]
    assert probe["mixed"] and probe["batch"] == 16
    (finding,) = [f for f in report["findings"] if f["code"] == "LK306"]
    assert "batch of 16" in finding["message"]


def test_a_batch_of_one_has_no_batch_to_mix(tmp_path):
    """One sentence pair at a time (`.view(1, 1, -1)`): the loss is over one sample, so the
    decoder's hidden size (256) and its attention length are no batch."""
    _, report = _run("audit", CORPUS / "seq2seq_one_pair.py", tmp_path)
    assert not any(f["code"] == "LK306" for f in report["findings"])
    assert all(not probe["mixed"] for probe in report["batch_probes"])


def test_an_optimizer_never_stepped_is_named_as_the_script_names_it(tmp_path):
    """The decoder's optimizer is built and never stepped: one finding, at the line that built
    it (not the encoder's optimizer's), naming `decoder_optimizer` and no `model`."""
    mutation = Mutation("seq2seq_one_pair.py", "    decoder_optimizer.step()", "    pass", "LK201")
    path, _ = _mutate(mutation, tmp_path)
    built = 1 + next(i for i, text in enumerate(path.read_text().splitlines())
                     if text.startswith("decoder_optimizer = "))
    rc, report = _run("audit", path, tmp_path)
    stale = [f for f in report["findings"] if f["code"] == "LK201"]
    assert len(stale) == 1, stale
    (finding,) = stale
    assert finding["severity"] == "error" and rc == 1
    assert finding["source"]["line"] == built
    assert "`decoder_optimizer`" in finding["message"] and "never called" in finding["message"]
    assert "decoder_optimizer.step()" in finding["fix"] and "model." not in finding["fix"]
    assert finding["module"] == "decoder"
