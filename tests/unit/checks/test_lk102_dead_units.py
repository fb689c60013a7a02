"""LK102 dead-units on hand-built stats: stats that must trigger it and stats that a naive rule
would misread but that must not (ruff-style fixtures, no training run). The zoo's training runs
(tests/e2e/test_checks_zoo.py) test the same checks end to end; the last test here trains a
real model, since whether the loss shows the harm is read from its run."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import activation, series, source, stats
from tests.check_cases import fires, quiet


# -- LK102 dead-units ----------------------------------------------------------------------
def _relu_layer(dead: int, samples: int = 640, **fields):
    relu = activation(site=1, op="relu", module="fc1", units=100, samples=samples, window=5, dead_units=dead,
                      source=source(line=20), **fields)
    return relu


def test_lk102_most_units_of_a_layer_dead_is_an_error():
    finding = fires("LK102", stats(steps=20, activations=(_relu_layer(70),)))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == (Severity.ERROR, "fc1", "relu", 20)
    # 640 samples over 20 steps: 160 in the 5-step window
    assert "70% of fc1's 100 relu units (70) output 0 for all ~160 samples of the last 5 observed steps" in finding.message
    assert finding.evidence["dead_share"] == 0.7 and finding.evidence["window_samples"] == 160


def test_lk102_a_third_of_the_units_silent_is_info_not_a_warning():
    # healthy ReLU nets keep 30-35% silent units: worth knowing, no harm
    (finding,) = quiet("LK102", stats(steps=20, activations=(_relu_layer(30),)), below=Severity.WARNING)
    assert finding.severity is Severity.INFO
    assert fires("LK102", stats(steps=20, activations=(_relu_layer(45),))).severity is Severity.WARNING
    quiet("LK102", stats(steps=20, activations=(_relu_layer(20),)))


def test_lk102_too_few_samples_in_the_window_is_not_judged():
    # 100 samples over 20 steps: 25 in the window, fewer than dead_min_samples (32)
    quiet("LK102", stats(steps=20, activations=(_relu_layer(90, samples=100),)))


def _died_at_step_10(norm_at_9: float = 1.0, lr_at_9: float = 1e-3):
    norms = [norm_at_9 if step == 9 else 1.0 for step in range(20)]
    lrs = [lr_at_9 if step >= 9 else 1e-3 for step in range(20)]
    relu = _relu_layer(70, died_steps=(10,) * 5, seen_dead_steps=(10,) * 5)
    return stats(steps=20, activations=(relu,), series=series(grad_norms=norms, lr=lrs))


def test_lk102_names_the_gradient_spike_just_before_the_units_died():
    finding = fires("LK102", _died_at_step_10(norm_at_9=50.0))
    assert finding.step == 10 and finding.evidence["died_between_steps"] == [10, 10]
    assert ("5 of them fired earlier and died at step 10. Just before, at step 9, the gradient norm spiked "
            "to 50 (50× its median).") in finding.message


def test_lk102_a_small_bump_or_lr_step_before_the_deaths_is_not_a_spike():
    # 5× the median is below dead_spike_factor (10), and an lr ×1.5 below lr_jump (2)
    finding = fires("LK102", _died_at_step_10(norm_at_9=5.0, lr_at_9=1.5e-3))
    assert "Nothing unusual was measured at step 9." in finding.message
    jumped = fires("LK102", _died_at_step_10(lr_at_9=3e-3))
    assert "the learning rate jumped from 0.001 to 0.003" in jumped.message


# -- an error only while the loss shows the harm (a real run) ------------------------------
def _killed_layer_run(learnable: bool, watch: dict | None = None):
    """A real CNN-free classifier whose hidden ReLU layer has 48 of its 64 units dead from
    the start (their bias far below any pre-activation): 75%, over dead_error. `learnable`:
    labels a function of the input, which the 16 live units fit (the loss falls far);
    else random labels on fresh inputs (chance: the loss stays)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    import leaky

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 2))
    with torch.no_grad():
        model[0].bias[:48] = -1e3
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    x_fixed = torch.randn(64, 8, generator=gen)
    with (leaky.watch(**watch) if watch is not None else leaky.audit(steps=60)) as run:
        for _ in range(60):
            x = x_fixed if learnable else torch.randn(64, 8, generator=gen)
            y = (x[:, 0] > 0).long() if learnable else torch.randint(0, 2, (64,), generator=gen)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    (finding,) = [f for f in run.report.findings if f.code == "LK102"]
    return (finding, run) if watch is not None else finding


def test_lk102_most_of_a_layer_dead_while_the_loss_falls_far_is_a_warning_that_says_so():
    fitted = _killed_layer_run(learnable=True)
    assert fitted.severity is Severity.WARNING and fitted.evidence["dead_units"] == 48
    assert fitted.evidence["loss_end"] <= 0.5 * fitted.evidence["loss_start"]
    assert "the live units carry the fit" in fitted.message
    stuck = _killed_layer_run(learnable=False)
    assert stuck.severity is Severity.ERROR and "loss_end" not in stuck.evidence


def test_lk102_a_loss_that_blew_up_and_came_back_to_chance_did_not_fall():
    """Karpathy's dead ReLUs: lr 10 drives the loss 2.3 → 317 in two steps, then back to
    2.3 (chance) with every unit dead; the mean of its first tenth (112) is no start to
    measure a fall from, so the finding stays an error."""
    from leaky.demo import audit_example
    from leaky.zoo import get

    report = audit_example(get("relu-high-lr"), steps=20)
    dead = [f for f in report.findings if f.code == "LK102"]
    assert dead and all(f.severity is Severity.ERROR and "loss_end" not in f.evidence for f in dead)


def test_lk102_an_error_a_watch_would_withdraw_is_not_announced_early(tmp_path):
    """A watch's pass at step 10 sees most of the layer dead and 11 losses, too few to say
    whether the loss falls: the error is provisional, not announced, and --fail-fast does not
    stop the run; by the end the loss has fallen far and the finding is the warning."""
    fitted, run = _killed_layer_run(learnable=True, watch={"every": 5, "fail_fast": True,
                                                           "store": tmp_path / "runs.db"})
    assert fitted.severity is Severity.WARNING and "provisional" not in fitted.evidence
    assert run.report.run["steps"] == 60      # not stopped early
    told = [f for f in run.announced.values() if f.code == "LK102"]
    assert told and all(f.severity is Severity.WARNING for f in told), told
