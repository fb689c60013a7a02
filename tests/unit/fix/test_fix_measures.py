"""`leaky fix` judges a fix with a measure that neither the leak nor the fix changes by
construction (a clamp on the loss path: the error inside it), and offers LK103's own fixes
(the init of the nonlinearity, a non-saturating activation) as runs."""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from leaky.cli import main
from leaky.fix import FixConfig, try_fixes
from leaky.rerun import verdict
from leaky.fix.remedies.vanishing_gradient import targets
from leaky.script import script_program
from leaky.zoo import get

SMALL = FixConfig(steps=60, holdout=10, repeats=1)


def fixes_for(name: str, config: FixConfig = SMALL):
    example = get(name)
    return try_fixes(lambda: example.run(steps=config.steps + config.holdout + 1, seed=0), config, name)


def outcome(result, key0: str, key1: str | None = None):
    found = [o for o in result.outcomes if o.candidate.key[0] == key0 and (key1 is None or o.candidate.key[1] == key1)]
    assert found, f"no {key0} fix proposed; tried {[o.candidate.title for o in result.outcomes]}"
    return found[0]


# -- a clamped objective is scored on what it clamps -------------------------------------
CLAMPED_REGRESSION = """\
import torch
from torch import nn

torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
w = torch.randn(8, 1, generator=gen)
for step in range(200):
    x = torch.randn(64, 8, generator=gen)
    y = 30 * x @ w                       # targets of scale ~85: the clamp binds on ~99% of errors
    err = model(x) - y
    loss = torch.clamp(err, -1, 1).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_clamped_errors_fix_is_judged_helps_on_the_unclamped_error(tmp_path, capsys):
    """Within 60 steps the errors stay far beyond ±1 in both runs, so the clamped loss is ~0.99
    in both (measured: 0.989 → 0.987, "no effect"); the error itself halves with the
    straight-through clamp (mean square ~3200 → ~1500)."""
    script = tmp_path / "train.py"
    script.write_text(CLAMPED_REGRESSION)
    out = tmp_path / "fixes.json"
    assert main(["fix", "--steps", "60", "--holdout", "10", "--repeats", "1", "--json", str(out), str(script)]) == 0
    data = json.loads(out.read_text())
    assert data["measure"]["own_loss"] is False and data["measure"]["label"] == "loss without clamp"
    assert data["measure"]["flat_ops"] == ["train.py:13"]
    assert "mean square of the unclamped error" in data["measure"]["how"]
    (fix,) = [f for f in data["fixes"] if f["key"][0] == "ste"]
    assert fix["verdict"] == "helps" and fix["measure"] == "loss without clamp"
    assert fix["loss_fixed"] < fix["loss_unfixed"] / 1.5
    assert fix["loss_unfixed"] > 100 > data["baseline"]["score"]     # the error, not the clamped loss (<= 1)
    assert fix["run"]["held_out_as"] == [f"passed through for the score at {script}:13"]
    text = capsys.readouterr().out
    assert "loss without clamp" in text and "passed through as the identity" in text


CORPUS = Path(__file__).parents[2] / "corpus"


def test_the_corpus_dqn_with_a_clamped_td_error_is_helped_by_the_straight_through_clamp(tmp_path):
    """The issue's script: tests/corpus/dqn_target_network.py with its loss mutated to
    torch.clamp(td_target - old_val, -1, 1).pow(2).mean() (a target network synced every 20
    updates). Scored on the clamped loss the fix read 'no effect' (0.759 → 0.758 at K=200);
    on the TD error it helps (measured at K=100: 1.96 → 0.92, margin 0.26)."""
    for name in ("dqn_target_network.py", "balance_env.py"):
        (tmp_path / name).write_text((CORPUS / name).read_text())
    script = tmp_path / "dqn_target_network.py"
    source = script.read_text()
    clamped = source.replace("loss = F.mse_loss(td_target, old_val)",
                             "loss = torch.clamp(td_target - old_val, -1, 1).pow(2).mean()")
    assert clamped != source
    script.write_text(clamped)
    out = tmp_path / "fixes.json"
    assert main(["fix", "--steps", "100", "--holdout", "20", "--repeats", "1", "--json", str(out), str(script)]) == 0
    data = json.loads(out.read_text())
    (fix,) = [f for f in data["fixes"] if f["key"][0] == "ste"]
    assert fix["verdict"] == "helps" and fix["measure"] == "loss without clamp"
    assert data["baseline"]["score"] < 1.0 < fix["loss_unfixed"]


def test_the_held_out_steps_keep_a_synced_target_network_at_step_k():
    """A program that copies its network into a target network every third step: after
    step K the copy is undone with the optimizer's step, so every held-out loss is the
    step-K model's against the step-K target (here the same batch: the same loss). Without
    it, the sync at held-out step 2 makes the target equal the network, and the loss 1."""
    from leaky.rerun.trial import run_trial

    def program():
        torch.manual_seed(0)
        net, target = nn.Linear(4, 1), nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        x = torch.randn(16, 4)
        for step in range(40):
            loss = (net(x) - target(x).detach() - 1.0).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 3 == 2:
                target.load_state_dict(net.state_dict())

    frozen = run_trial(program, None, 0, 10, 5, 5, freeze_modules=True)
    assert len(frozen.holdout) == 5 and len(set(frozen.holdout)) == 1 and frozen.holdout[0] != 1.0
    moving = run_trial(program, None, 0, 10, 5, 5)
    assert moving.holdout[:2] == frozen.holdout[:2] and moving.holdout[2:] == [1.0] * 3   # net - net - 1


def test_the_zoo_dqn_is_scored_on_its_td_error_and_every_unfixed_run_the_same_way():
    result = fixes_for("dqn-clamped-td")
    assert result.measure.unflattened and result.reproducible
    ste = outcome(result, "ste")
    assert ste.verdict == verdict.HELPS and ste.measure == "loss without clamp"
    assert result.reference is not result.baseline and result.reference.held_out_as
    assert result.noise.scores[0] == ste.unfixed_score == result.reference.score
    assert result.baseline.score <= 1.0 < ste.unfixed_score   # the baseline keeps the program's own loss


def test_a_hidden_dead_zone_keeps_the_programs_own_loss():
    """round() inside the network (LK106, not on the loss path): the loss still sees the
    error, so it stays the measure."""
    result = fixes_for("round-no-ste")
    assert outcome(result, "ste").measure == "loss"
    assert not result.measure.unflattened and result.reference is result.baseline
    assert all(not o.trial.held_out_as for o in result.outcomes)


# -- LK103: the fixes its text names ------------------------------------------------------
DEEP_SIGMOID = """\
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
layers = []
d = 32
for _ in range(8):
    layers += [nn.Linear(d, 64), nn.Sigmoid()]
    d = 64
model = nn.Sequential(*layers, nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
w = torch.randn(32, 10, generator=gen)
x_all = torch.randn(2048, 32, generator=gen)
y_all = (x_all @ w).argmax(1)
for step in range(300):
    idx = torch.randint(0, 2048, (64,), generator=gen)
    loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_deep_sigmoid_stack_gets_a_non_saturating_activation_that_helps(tmp_path):
    """8 sigmoid layers, default init: the gradient at the first layer is ~1e-7 of the last's
    and the loss stays at chance (2.29). ReLU with Kaiming init and tanh with Xavier init
    each bring the ratio near 1 and the loss down; the Xavier re-init alone cannot lift the
    sigmoid's 1/4 (measured: no effect)."""
    script = tmp_path / "train.py"
    script.write_text(DEEP_SIGMOID)
    result = try_fixes(script_program(str(script), []), FixConfig(steps=100, holdout=10, repeats=1))
    assert "LK103" not in {f.code for f in result.unfixable}
    relu, tanh = targets()
    for target in (relu, tanh):
        swap = outcome(result, "swap", target.name)
        assert swap.candidate.places == [str(i) for i in range(1, 16, 2)] and swap.trial.applied
        assert swap.verdict == verdict.HELPS
        # the rows of the findings LK103 explains (LK202 of the weights it starves) follow it
        (code, measure, before, after), *explained = swap.metrics
        assert all(row[0].startswith("LK20") for row in explained), explained
        assert code.startswith("LK103") and measure == "gradient at the first layer / at the last"
        assert float(before) < 1e-5 < 0.1 < float(after)
        assert f"-    layers += [nn.Linear(d, 64), nn.Sigmoid()]\n+    layers += [nn.Linear(d, 64), " \
               f"nn.{target.module}()]\n" in swap.change.text
        assert "for layer in (model[0], model[2]," in swap.change.text
    assert outcome(result, "reinit-path").candidate.places == []
    assert script.read_text() == DEEP_SIGMOID


def test_the_deep_vanishing_example_gets_the_init_of_its_tanh_and_a_relu(capsys, tmp_path):
    """deep-vanishing: 12 tanh layers with weights of gain 0.3. The tanh is not saturated
    (its gain is ~0.99); the linear layers lose 0.3× each. Re-initialising with Xavier at
    tanh's gain cures it; ReLU (a functional call at one line) with Kaiming init too."""
    out = tmp_path / "fixes.json"
    assert main(["fix", "--example", "deep-vanishing", "--steps", "100", "--holdout", "10", "--repeats", "1",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    by_key = {tuple(f["key"][:1]): f for f in data["fixes"]}
    reinit = by_key[("reinit-path",)]
    assert reinit["verdict"] == "helps" and reinit["loss_fixed"] < reinit["loss_unfixed"] / 2
    assert reinit["fix"].startswith("re-initialise the 12 layers from layers.0 to layers.11 with xavier_normal_")
    target = targets()[0]
    (relu,) = [f for f in data["fixes"] if f["key"][:2] == ["swap", target.name]]
    assert relu["verdict"] == "helps" and len(relu["applied"]) == 13      # 12 layers and the call at one line
    example = get("deep-vanishing")
    source = Path(example.file).read_text(encoding="utf-8").splitlines()
    line = next(n for n, text in enumerate(source, 1) if "x = torch.tanh(x)" in text)
    assert relu["applied"][-1] == f"{target.module} in place at {example.file}:{line}"
    assert all(f["findings"][0]["code"] == "LK103" for f in (reinit, relu))
    assert "LK103" not in {f["code"] for f in data["without_fix"]}
    assert "helps" in capsys.readouterr().out


def test_a_healthy_deep_network_gets_no_lk103_fix():
    result = fixes_for("deep-kaiming-batchnorm")
    assert result.outcomes == [] and result.unfixable == []


CLAMPED_PROBABILITY = """\
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
model = nn.Linear(16, 1)
with torch.no_grad():
    model.weight.mul_(4)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
w = torch.randn(16, generator=gen)
for step in range(200):
    x = torch.randn(64, 16, generator=gen)
    y = (x @ w > 0).float()[:, None]
    loss = F.binary_cross_entropy(torch.clamp(model(x), 0, 1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_clamp_into_probabilities_is_scored_on_the_programs_own_loss(tmp_path):
    """clamp(p, 0, 1) before binary_cross_entropy: passed through, the held-out scoring fed
    values outside [0, 1] to the loss, which raised, and every run was 'not judged' with 'the
    program cannot be re-run'. The loss takes probabilities, so its own loss is the measure
    (a sample clamped on the wrong side scores -log(eps)): every run is judged."""
    script = tmp_path / "train.py"
    script.write_text(CLAMPED_PROBABILITY)
    out = tmp_path / "fixes.json"
    assert main(["fix", "--steps", "60", "--holdout", "10", "--repeats", "1", "--json", str(out), str(script)]) == 0
    data = json.loads(out.read_text())
    assert data["measure"]["own_loss"] is True
    assert data["fixes"] and all(f["verdict"] in ("helps", "no effect", "hurts") for f in data["fixes"])


def test_the_before_after_column_reads_the_share_lk106_judges_a_bounded_activation_by():
    """A relu6 is judged by its unit-samples at the upper bound (the lower one is ReLU
    sparsity, LK102's); its backward also zeroes the negative ones. `leaky fix`'s column
    must show the share the finding rests on, not the backward's."""
    import torch.nn.functional as F

    import leaky
    from leaky.fix.metrics import measure
    from leaky.numbers import pct

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU6(), nn.Linear(64, 1))
    with torch.no_grad():
        model[0].weight.mul_(20)   # pre-activations of ~±40 around a bias of 3: many past either bound
        model[0].bias.fill_(3.0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with leaky.audit() as audit:
        for _ in range(10):
            x = torch.randn(128, 16)
            loss = F.mse_loss(model(x), x[:, :1])
            opt.zero_grad()
            loss.backward()
            opt.step()
    findings = audit.report.findings
    (finding,) = [f for f in findings if f.code == "LK106"]
    backward = next(op.zeroed_share for op in audit.stats.ops if op.op == finding.op)
    assert backward > 1.5 * finding.evidence["zeroed_share"]   # the two measures differ here
    assert measure(finding, audit.stats, list(findings)) == ("gradient elements zeroed",
                                                             pct(finding.evidence["zeroed_share"]))


# -- the layer a re-initialisation is for ------------------------------------------------
class _ThreeRelus(nn.Module):
    """Like a LightningModule's forward: F.relu on three lines of one module; only the last
    one's units (after fc1, its bias far below 0) are dead."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc1 = nn.Linear(4 * 8 * 8, 32)
        self.fc2 = nn.Linear(32, 3)
        with torch.no_grad():
            self.fc1.bias.fill_(-50.0)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = F.relu(self.conv2(x))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def test_the_layer_to_re_initialise_is_the_one_before_the_finding_s_own_line():
    """pytorch-lightning-style forward, three F.relu calls in one module: the dead units are
    the third's, so the layer that feeds them is fc1, not the BatchNorm before the first."""
    import leaky
    from leaky.fix.remedies import feeding_layer

    torch.manual_seed(0)
    model = _ThreeRelus()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with leaky.audit(steps=8) as run:
        for _ in range(8):
            x, y = torch.randn(16, 1, 8, 8), torch.randint(0, 3, (16,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    dead = [f for f in run.report.findings if f.code == "LK102"]
    assert len(dead) == 1 and dead[0].source.line == _ThreeRelus.forward.__code__.co_firstlineno + 3
    assert feeding_layer(run.stats, dead[0]) == "fc1"
