"""`leaky fix`: the right fix is found and verified on the built-in broken examples, healthy
models get none, unreproducible programs are not judged, and nothing is left behind."""
from __future__ import annotations

import json
import math
import random
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from leaky.cli import main
from leaky.fix import FixConfig, try_fixes
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.rerun import verdict
from leaky.zoo import get

CONFIG = FixConfig(steps=200, holdout=20, repeats=2)


def fixes_for(name: str, config: FixConfig = CONFIG):
    example = get(name)
    return try_fixes(lambda: example.run(steps=config.steps + config.holdout + 1, seed=0), config, name)


def outcome(result, key0: str):
    found = [o for o in result.outcomes if o.candidate.key[0] == key0]
    assert found, f"no {key0} fix proposed; tried {[o.candidate.title for o in result.outcomes]}"
    return found[0]


# -- the four: the right fix is found and verified ------------------------------
def test_huber_gradient_for_the_clamped_dqn_td_error():
    result = fixes_for("dqn-clamped-td")
    assert result.reproducible
    ste = outcome(result, "ste")
    assert ste.verdict == verdict.HELPS
    assert ste.trial.score < ste.unfixed_score - result.noise.margin
    (_, measure, before, after), = ste.metrics
    assert measure == "gradient elements zeroed" and before != "0%" and after == "0%"
    assert ste.change.kind == "diff" and "+" in ste.change.text and ".detach()" in ste.change.text


def test_lower_learning_rate_or_leaky_relu_for_dead_relus():
    result = fixes_for("relu-high-lr")
    helping = {o.candidate.key[0] for o in result.outcomes if o.verdict == verdict.HELPS}
    assert helping & {"lr", "leaky-relu"}
    lr = outcome(result, "lr")
    assert lr.candidate.key == ("lr", 0.1)
    dead_before, dead_after = [(m[2], m[3]) for m in lr.metrics if m[1] == "dead units"][0]
    assert int(dead_after.split("/")[0]) < int(dead_before.split("/")[0])


def test_reinit_for_the_saturated_sigmoid_net():
    result = fixes_for("sigmoid-big-init")
    reinit = outcome(result, "reinit")
    assert reinit.candidate.places == ["fc1"]
    assert reinit.verdict == verdict.HELPS
    flat = [m for m in reinit.metrics if m[1] == "unit-samples in the flat region"][0]
    assert float(flat[3].rstrip("%")) < float(flat[2].rstrip("%"))


def test_clipping_for_the_exploding_rnn():
    result = fixes_for("rnn-exploding")
    clip = outcome(result, "clip")
    assert clip.verdict == verdict.HELPS
    assert "amplification" in clip.candidate.note
    assert clip.change is not None and "clip_grad_norm_" in clip.change.text


@pytest.mark.parametrize("name, key", [
    ("round-no-ste", "ste"),                       # LK106 round: straight-through estimator
    ("ce-after-softmax", "normaliser"),            # LK301: softmax removed, scored the fixed way
    ("nll-on-probabilities", "normaliser"),        # LK301: log_softmax in place of softmax
    ("unnormalized-input", "standardise"),         # LK303
    ("head-added-after-optimizer", "add-params"),  # LK201: parameters added to the optimizer
    ("adam-lr-too-high", "lr"),                    # LK202: lr x 0.1
])
def test_other_fixes_verified_on_their_examples(name, key):
    result = fixes_for(name)
    assert outcome(result, key).verdict == verdict.HELPS


def test_a_fix_that_changes_the_loss_is_scored_by_the_same_function():
    result = fixes_for("ce-after-softmax")
    fix = outcome(result, "normaliser")
    assert fix.candidate.changes_loss
    # the unfixed model scored with cross_entropy on its logits, not on its softmax outputs
    assert fix.unfixed_score != result.baseline.score


@pytest.mark.parametrize("name", ["relu-mlp", "sigmoid-xavier", "dqn-huber", "rnn-clipped-orthogonal",
                                  "accumulate-four", "frozen-backbone"])
def test_no_fix_is_proposed_for_a_healthy_model(name):
    result = fixes_for(name, FixConfig(steps=60, holdout=10, repeats=1))
    assert result.outcomes == []
    assert result.reproducible is None   # nothing to try: no extra run was made


# -- honesty -----------------------------------------------------------------------------
def _live_data_program(steps: int = 240):
    """A clamped-TD regression that draws its batches from an unseeded source."""
    def program():
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        rng = random.SystemRandom()
        for _ in range(steps):
            x = torch.tensor([[rng.gauss(0, 1) for _ in range(4)] for _ in range(32)])
            y = 10 * x.sum(dim=1, keepdim=True)
            loss = torch.clamp(model(x) - y, -1, 1).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return program


def test_a_program_that_cannot_be_rerun_is_not_judged():
    result = try_fixes(_live_data_program(), FixConfig(steps=40, holdout=5, repeats=1))
    assert result.outcomes, "the clamp should still get a candidate"
    assert result.reproducible is False and "step" in result.difference
    assert {o.verdict for o in result.outcomes} == {verdict.NOT_JUDGED}


def test_noise_margin_and_verdicts():
    noisy = verdict.noise([1.0, 1.2, 0.9])
    assert noisy.margin == pytest.approx(0.3)
    assert verdict.judge(1.0, 0.6, noisy.margin) == verdict.HELPS
    assert verdict.judge(1.0, 0.8, noisy.margin) == verdict.NO_EFFECT
    assert verdict.judge(1.0, 1.5, noisy.margin) == verdict.HURTS
    assert verdict.noise([2.0, 2.0]).margin == pytest.approx(0.02)       # the 1% floor
    assert verdict.judge(math.inf, 3.0, 0.0) == verdict.HELPS
    unstable = verdict.noise([2.0, math.inf, 2.1])      # one shifted-seed run diverged
    assert unstable.margin == pytest.approx(0.1) and unstable.diverged == 1
    assert verdict.judge(2.0, 1.0, unstable.margin) == verdict.HELPS
    assert verdict.judge(3.0, math.inf, 0.0) == verdict.HURTS


def test_fixes_leave_nothing_behind():
    from torch.nn.modules import module as module_globals
    from torch.optim import optimizer as optimizer_globals

    backward, seed = torch.Tensor.backward, torch.manual_seed
    fixes_for("dqn-clamped-td", FixConfig(steps=30, holdout=5, repeats=1))
    assert torch.Tensor.backward is backward and torch.manual_seed is seed
    assert torch._C._len_torch_function_stack() == 0
    assert not module_globals._global_forward_pre_hooks and not module_globals._global_module_registration_hooks
    assert not optimizer_globals._global_optimizer_pre_hooks and not optimizer_globals._global_optimizer_post_hooks


# -- run-time primitives against references ----------------------------------------------
def test_straight_through_clamp_gives_the_huber_gradient():
    td = torch.tensor([-3.0, -0.5, 0.2, 2.5], requires_grad=True)
    with rt.OpAtLine(__file__, _line_of_clamp(), {"clamp"}, rt.straight_through, "ste"):
        loss = 0.5 * _clamped(td).pow(2).sum()
    (grad,) = torch.autograd.grad(loss, td)
    reference = td.detach().clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(F.smooth_l1_loss(reference, torch.zeros(4), reduction="sum"), reference)
    assert torch.equal(grad, expected)
    assert loss.item() == pytest.approx(0.5 * (1 + 0.25 + 0.04 + 1))   # the value is the clamped one


def _clamped(td):
    return torch.clamp(td, -1.0, 1.0)


def _line_of_clamp() -> int:
    import inspect

    source, start = inspect.getsourcelines(_clamped)
    return start + 1


def test_scaled_lr_is_restored_after_each_step():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = model.weight.detach().clone()
    with rt.scaled_lr(0.1):
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
    assert opt.param_groups[0]["lr"] == 0.5
    assert torch.allclose(before - model.weight.detach(), 0.05 * torch.full((1, 3), 2.0))


def test_loss_scaling_skips_an_overflowing_step_and_halves():
    model = nn.Linear(2, 1).half()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaling = rt.LossScaling(scale=2.0 ** 40)
    with scaling:
        before = model.weight.detach().clone()
        model(torch.ones(1, 2, dtype=torch.half)).float().sum().backward()
        opt.step()
    assert torch.equal(before, model.weight.detach()) and scaling.scale == 2.0 ** 39


def test_module_edit_finds_a_path_under_two_roots():
    policy, target = nn.Sequential(nn.Linear(2, 2), nn.ReLU()), nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    edit = rt.ModuleEdit(["policy.1"], rt.swap_forward(lambda x: x * 0 + 7), "seven")
    with edit:
        target(torch.ones(1, 2))
        out = policy(torch.ones(1, 2))
    assert torch.all(out == 7) and edit.applied == ["seven at policy.1"]
    assert "forward" not in policy[1].__dict__


# -- code changes ------------------------------------------------------------------------
def test_diffs_rewrite_only_the_reported_call(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent("""\
        import torch
        def train(model, x, y):
            opt = torch.optim.Adam(model.parameters(), lr=3e-2)
            err = (model(x) - y).clamp(-1, 1)
            loss = err.pow(2).mean()
            loss.backward()
            opt.step()
        """))
    ste = edits.rewrite_call(str(path), 4, {"clamp"}, lambda s, n: f"STE({edits.operand(s, n)})")
    assert "-    err = (model(x) - y).clamp(-1, 1)\n+    err = STE((model(x) - y))\n" in ste.text
    prelude = edits.rewrite_call(str(path), 4, {"clamp"}, lambda s, n: ("e = 1", "e"))
    assert "-    err = (model(x) - y).clamp(-1, 1)\n+    e = 1\n+    err = e\n" in prelude.text
    lr = edits.scale_lr(str(path), 6, 0.1)
    assert "+    opt = torch.optim.Adam(model.parameters(), lr=0.003)" in lr.text
    clip = edits.insert_line(str(path), 6, "clip()")
    assert "     loss.backward()\n+    clip()\n     opt.step()" in clip.text
    assert edits.optimizer_variable(str(path), 6) == "opt"


# -- the command -------------------------------------------------------------------------
SCRIPT = """\
import torch
from torch import nn

torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
w = torch.randn(8, 1, generator=gen)
for step in range({steps}):
    x = torch.randn(64, 8, generator=gen)
    y = 10 * x @ w
    err = torch.clamp(model(x) - y, -1.0, 1.0)
    loss = err.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
"""


def test_cli_fix_on_a_script(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(steps=400))
    out = tmp_path / "fixes.json"
    code = main(["fix", "--steps", "120", "--holdout", "10", "--repeats", "1", "--json", str(out), str(script)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "leaky/fix-v1" and data["reproducible"] is True and data["held_out"] is True
    (fix,) = [f for f in data["fixes"] if f["key"][0] == "ste"]
    assert fix["verdict"] == "helps" and fix["change"]["kind"] == "diff"
    assert ("-    err = torch.clamp(model(x) - y, -1.0, 1.0)\n"
            "+    unclamped = model(x) - y\n"
            "+    err = (unclamped + (torch.clamp(unclamped, -1.0, 1.0) - unclamped).detach())\n") in fix["change"]["text"]
    text = capsys.readouterr().out
    assert "helps" in text and "+    unclamped = model(x) - y" in text
    assert script.read_text() == SCRIPT.format(steps=400)   # the user's file is never edited


def test_cli_fix_says_when_nothing_is_held_out(tmp_path, capsys):
    script = tmp_path / "short.py"
    script.write_text(SCRIPT.format(steps=30))
    assert main(["fix", "--steps", "100", "--repeats", "1", str(script)]) == 0
    assert "before any held-out batch" in capsys.readouterr().out


def test_cli_fix_errors_are_one_line_and_a_failing_script_ends_as_python_would(tmp_path, capsys):
    assert main(["fix", str(tmp_path / "missing.py")]) == 2
    assert main(["fix"]) == 2
    assert main(["fix", "--example", "no-such-example"]) == 2
    failing = tmp_path / "failing.py"
    failing.write_text("raise RuntimeError('no data in ./data')\n")
    assert main(["fix", str(failing)]) == 1        # the script's own status, as `python failing.py` ends
    captured = capsys.readouterr()
    assert "no such file" in captured.err and "--example NAME" in captured.err
    assert "raised RuntimeError: no data in ./data (" in captured.err
    assert "before its first optimizer step; no fix to try." in captured.err
    assert captured.err.endswith("    raise RuntimeError('no data in ./data')\nRuntimeError: no data in ./data\n")
    assert "nothing to compare" not in captured.out


SOFTMAX_SCRIPT = """\
import torch
from torch import nn

torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
model = nn.Sequential(
    nn.Linear(10, 32),
    nn.ReLU(),
    nn.Linear(32, 10),
    nn.Softmax(dim=1),
)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
w = torch.randn(10, 10, generator=gen)
for step in range(200):
    x = torch.randn(64, 10, generator=gen)
    loss = nn.functional.cross_entropy(model(x), (x @ w).argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_softmax_module_before_cross_entropy_is_removed_and_the_diff_names_its_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SOFTMAX_SCRIPT)
    from leaky.script import script_program

    result = try_fixes(script_program(str(script), []), FixConfig(steps=100, holdout=10, repeats=1))
    fix = outcome(result, "normaliser")
    assert fix.candidate.changes_loss and fix.trial.applied
    assert fix.verdict == verdict.HELPS
    assert "-    nn.Softmax(dim=1),\n+    nn.Identity(),\n" in fix.change.text


def test_a_hardtanh_module_dead_zone_is_tried_by_its_path():
    """An nn.Hardtanh module whose input is driven far past its bounds: the straight-through
    fix is applied to that module (its zeroed share goes to 0) and judged like any other;
    here the real cause is the over-scaled layer before it, and its re-initialisation helps."""
    def program():
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(1)
        model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1), nn.Hardtanh(-1.0, 1.0))
        with torch.no_grad():
            model[2].weight.mul_(30.0)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        w = torch.randn(4, 1, generator=gen)
        for _ in range(300):
            x = torch.randn(32, 4, generator=gen)
            loss = (model(x) - torch.tanh(x @ w)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    result = try_fixes(program, FixConfig(steps=150, holdout=10, repeats=1))
    ste = outcome(result, "ste")
    assert ste.candidate.places == ["3"] and ste.trial.applied
    (_, measure, before, after), = ste.metrics
    assert measure == "gradient elements zeroed" and before != "0%" and after == "0%"
    assert outcome(result, "reinit").verdict == verdict.HELPS


def test_a_zero_grad_between_backward_and_step_is_moved(tmp_path):
    """optimizer.zero_grad() between backward() and step(): the fix skips that call and
    zeroes after each step instead, the audit of the fixed run no longer sees the leak, and
    the diff moves the line above loss.backward()."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(steps=300).replace(
        "    err = torch.clamp(model(x) - y, -1.0, 1.0)\n", "    err = model(x) - y\n").replace(
        "    opt.zero_grad()\n    loss.backward()\n", "    loss.backward()\n    opt.zero_grad()\n"))
    from leaky.script import script_program

    original = torch.optim.Optimizer.__dict__["zero_grad"]
    result = try_fixes(script_program(str(script), []), FixConfig(steps=100, holdout=10, repeats=1))
    assert torch.optim.Optimizer.__dict__["zero_grad"] is original
    moved = outcome(result, "move-zero-grad")
    assert moved.verdict == verdict.HELPS
    # LK201, then the findings it explains (the flat loss), each gone
    assert moved.metrics[0][0].startswith("LK201") and {m[3] for m in moved.metrics} == {"gone"}
    assert "+    opt.zero_grad()\n     loss.backward()\n-    opt.zero_grad()\n" in moved.change.text


def test_progress_reports_each_run_and_its_steps():
    runs, steps = [], []
    example = get("dqn-clamped-td")
    try_fixes(lambda: example.run(steps=100, seed=0), FixConfig(steps=30, holdout=5, repeats=1),
              progress=runs.append, on_step=lambda done, total: steps.append((done, total)))
    assert runs[0].startswith("unfixed run") and any(r.startswith("fix 1/") for r in runs)
    # every run counts 1..35 of 35: the unfixed run, its repeat, one shifted-seed run, one fix
    assert steps.count((35, 35)) == len(runs) == 4 and steps[0] == (1, 35)
