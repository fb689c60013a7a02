"""Observation changes nothing, and leaves nothing behind."""
from __future__ import annotations

import pytest
import torch

import leaky
from tests.conftest import no_leaky_left
from tests.models import CNN, MLP, GRUNet, TinyTransformer, train

MODELS = {"mlp-dropout": lambda: MLP(dropout=0.2), "cnn-batchnorm": CNN, "gru": GRUNet,
          "transformer-dropout": TinyTransformer}


def _run(factory, audited: bool, steps: int = 4):
    torch.manual_seed(123)
    model = factory()
    if audited:
        with leaky.audit() as audit:
            losses = train(model, steps)
        assert audit.report.run["steps"] == steps
        (probe,) = audit.report.batch_probes   # LK306's probe ran, and changed nothing
        assert probe["judged"] and not probe["mixed"], probe
    else:
        losses = train(model, steps)
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_is_bit_identical_under_audit(name):
    plain_losses, plain_state = _run(MODELS[name], audited=False)
    seen_losses, seen_state = _run(MODELS[name], audited=True)
    assert all(torch.equal(a, b) for a, b in zip(plain_losses, seen_losses))
    assert plain_state.keys() == seen_state.keys()
    for key in plain_state:
        assert torch.equal(plain_state[key], seen_state[key]), key


def test_autocast_training_is_bit_identical_under_audit():
    def run(audited):
        torch.manual_seed(5)
        model = MLP()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
        ctx = leaky.audit() if audited else None
        losses = []
        with (ctx or _Null()):
            for _ in range(3):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.detach().clone())
        return losses, [p.detach().clone() for p in model.parameters()]

    (l1, p1), (l2, p2) = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(l1, l2))
    assert all(torch.equal(a, b) for a, b in zip(p1, p2))


def test_setup_inside_the_audit_is_bit_identical():
    """Model, optimizer and scheduler built under observation, a dtype cast, module and
    optimizer zero_grad(): the wrapped constructors and methods change nothing."""
    def run(audited):
        ctx = leaky.audit() if audited else None
        with (ctx or _Null()):
            torch.manual_seed(11)
            model = MLP(dropout=0.1).double()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 3))
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(torch.optim.SGD(model.parameters(), lr=0.1))
            x, y = torch.randn(16, 8, dtype=torch.float64), torch.randint(0, 3, (16,))
            losses = []
            for step in range(4):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                (model if step % 2 else opt).zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                plateau.step(loss.item())
                losses.append(loss.detach().clone())
        return losses, [p.detach().clone() for p in model.parameters()]

    (l1, p1), (l2, p2) = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(l1, l2))
    assert all(torch.equal(a, b) for a, b in zip(p1, p2))
    assert no_leaky_left() == []


def test_nothing_left_when_a_wrapped_constructor_raises():
    with pytest.raises(ValueError, match="empty parameter list"):
        with leaky.audit():
            torch.optim.SGD([], lr=0.1)
    assert no_leaky_left() == []


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_nothing_left_after_a_normal_exit():
    with leaky.audit():
        train(MLP(), 2)
    assert no_leaky_left() == []


def _parameter_hooks(model) -> list[str]:
    return [name for name, p in model.named_parameters() if getattr(p, "_post_accumulate_grad_hooks", None)]


def test_nothing_left_when_the_training_raises():
    model = MLP()
    with pytest.raises(RuntimeError, match="boom"):
        with leaky.audit():
            train(model, 1)
            raise RuntimeError("boom")
    assert no_leaky_left() == []
    assert _parameter_hooks(model) == []


def test_no_parameter_hook_left_by_a_watch_or_between_its_samples(tmp_path):
    """Hooks on parameters (after gradient accumulation) are on only through sampled steps."""
    model = MLP()
    with leaky.watch(every=3, store=tmp_path / "runs.db") as run:
        train(model, 1)                       # step 0: sampled; step 1 is not
        assert run.recorder.step == 1 and _parameter_hooks(model) == []
    model = MLP()
    with leaky.watch(every=1, store=tmp_path / "runs.db") as run:
        train(model, 1)                       # every step sampled: they stay on
        assert _parameter_hooks(model) != []
    assert _parameter_hooks(model) == []
    assert no_leaky_left() == []


def test_nothing_left_when_stopped_mid_forward():
    class Explodes(torch.nn.Module):
        def forward(self, x):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with leaky.audit():
            Explodes()(torch.randn(2))
    assert no_leaky_left() == []


def test_second_audit_gives_the_same_report():
    def once():
        torch.manual_seed(7)
        with leaky.audit() as audit:
            train(MLP(), 3)
        report = audit.report.to_dict()
        return report["findings"], [(m["module"], m["grad_norm"]) for m in report["modules"]]

    assert once() == once()


def test_steps_limit_stops_observing_but_not_training():
    model = MLP()
    with leaky.audit(steps=2) as audit:
        losses = train(model, 5)
    assert len(losses) == 5
    assert audit.report.run["steps"] == 2


def test_an_internal_error_warns_and_never_breaks_training(monkeypatch):
    from leaky.config import AuditConfig
    from leaky.record import gradients

    def broken(*args, **kwargs):
        raise ValueError("simulated leaky bug")

    monkeypatch.setattr(gradients.GradientRecorder, "_record", broken)
    plain_losses, _ = _run(MLP, audited=False)
    torch.manual_seed(123)
    model = MLP()
    with pytest.warns(RuntimeWarning, match="simulated leaky bug"):
        with leaky.audit(config=AuditConfig(steps=None, strict=False)) as audit:
            losses = train(model, 4)
    assert all(torch.equal(a, b) for a, b in zip(plain_losses, losses))
    assert "simulated leaky bug" in audit.report.run["internal_error"]
    assert no_leaky_left() == []


def test_an_audited_step_makes_one_device_to_host_copy(monkeypatch):
    """Every per-step value (the step's records, its loss and gradient norm) stays on the
    device until the step's one flush: one `.cpu()` per step, after the first (the one-time
    probes of a model's first step copy their own)."""
    torch.manual_seed(0)
    model = MLP(dropout=0.2)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    copies = []
    original = torch.Tensor.cpu

    def counted(self, *args, **kwargs):
        copies.append(1)
        return original(self, *args, **kwargs)

    per_step = []
    with leaky.audit(steps=6):
        for step in range(6):
            x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
            monkeypatch.setattr(torch.Tensor, "cpu", counted)
            copies.clear()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            monkeypatch.setattr(torch.Tensor, "cpu", original)
            per_step.append(len(copies))
    assert per_step[1:] == [1] * 5, per_step


@pytest.mark.parametrize("clear", ["optimizer", "module"])
def test_ops_after_a_zero_grad_inside_the_step_are_still_observed(clear):
    """zero_grad() runs with leaky's mode off (its `p.grad` reads and writes are not the
    model's ops); the ops after it, here the loss and the layers of a second forward, are
    still recorded, and the zero_grad itself still counted."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    with leaky.audit() as audit:
        for _ in range(3):
            hidden = model.act1(model.fc1(x))
            (opt if clear == "optimizer" else model).zero_grad()
            loss = torch.nn.functional.cross_entropy(model.fc3(model.act2(model.fc2(hidden))), y)
            loss.backward()
            opt.step()
    ops = {site.op for site in audit.recorder.sites.sites}
    assert {"linear", "relu", "tanh", "cross_entropy"} <= ops, ops
    assert audit.report.run["steps"] == 3
    assert audit.recorder.origins.zero_grads
    assert torch._C._len_torch_function_stack() == 0
    assert not no_leaky_left()


def test_objects_alive_at_the_start_are_frozen_while_observing_and_a_processs_own_freeze_is_left_alone():
    """The collector skips the objects alive when an audit starts (gc.freeze, see
    Recorder.__enter__) and sees them again after it; a process that froze objects itself
    keeps them frozen."""
    import gc

    model = MLP()
    with leaky.audit():
        assert gc.get_freeze_count() > 0
        train(model, 2)
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        with leaky.audit():
            train(model, 2)
        assert gc.get_freeze_count() > 0   # not unfrozen by leaky
    finally:
        gc.unfreeze()
    assert not no_leaky_left()
