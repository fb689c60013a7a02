"""A NaN born in the forward of a watch's unsampled step is named at its op, line and step by
a replay of that step's forward (record/replay.py); the replay changes nothing of the training.

Real models, a real backward and a real optimizer; the NaN comes from the data: a log of a
value that one poisoned input makes negative."""
from __future__ import annotations

import copy
import inspect
import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.config import AuditConfig
from leaky.record import replay as replay_module
from tests.conftest import no_leaky_left

SEEN: list[float] = []   # the poisoned forward's pre-log sum, from the step and from its replay


class Poisoned(nn.Module):
    """tanh(fc1(x)) in [-1, 1] (through batch norm and dropout when `noisy`), then a log of
    x[:, 0] + 2 + h: >= 1 while the inputs are in [0, 1), NaN once one is -100."""

    def __init__(self, noisy: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.BatchNorm1d(16) if noisy else nn.Identity()
        self.drop = nn.Dropout(0.5) if noisy else nn.Identity()
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        h = torch.tanh(self.drop(self.norm(self.fc1(x))))
        if x[:, 0].min() < 0:
            SEEN.append(h.sum().item())
        z = torch.log(x[:, :1] + 2 + h)   # the NaN's birth
        return self.fc2(z)


_LINES, _FIRST = inspect.getsourcelines(Poisoned)
LOG_LINE = next(at for at, line in enumerate(_LINES, _FIRST) if "torch.log(" in line)


def train(model: nn.Module, steps: int, poison_at: int | None) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for step in range(steps):
        x = torch.rand(16, 8, generator=gen)
        y = torch.randint(0, 3, (16,), generator=gen)
        if step == poison_at:
            x[3, 0] = -100.0
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    return losses


def run(steps: int, poison_at: int | None, noisy: bool = False, every: int | None = 1000, config=None, told=None):
    """(losses, state_dict, the watch or None, the model) of one seeded run; `told`: a list
    that gets (code, op, step of the finding, step announced at) of each finding announced."""
    torch.manual_seed(0)
    model = Poisoned(noisy)
    if every is None:
        return train(model, steps, poison_at), model.state_dict(), None, model
    watch = leaky.watch(every=every, config=config)
    if told is not None:
        watch.on_finding = lambda finding, step: told.append((finding.code, finding.op, finding.step, step))
    with watch:
        losses = train(model, steps, poison_at)
    return losses, model.state_dict(), watch, model


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical, a NaN equal to a NaN."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))


def lk107(watch):
    found = [f for f in watch.report.findings if f.code == "LK107"]
    assert len(found) == 1, [f.code for f in watch.report.findings]
    return found[0]


def assert_named_at_log(finding, step: int) -> None:
    assert finding.op == "log"
    assert finding.source is not None and finding.source.line == LOG_LINE
    assert finding.step == step and finding.evidence["step"] == step and finding.evidence["phase"] == "forward"
    assert f"at step {step}" in finding.message


def test_nan_at_step_0_is_named_on_the_sampled_step():
    _, _, watch, model = run(3, poison_at=0)
    assert_named_at_log(lk107(watch), 0)
    assert watch.recorder.replay.replays == 0   # step 0 is sampled: no replay needed
    assert no_leaky_left() == [] and not model._forward_pre_hooks


def test_nan_at_unsampled_step_500_is_named_by_a_replay():
    plain_losses, plain_state, _, _ = run(503, poison_at=500, every=None)
    told = []
    losses, state, watch, model = run(503, poison_at=500, told=told)
    assert told == [("LK107", "log", 500, 500)]   # announced live, at the step itself
    assert lk107(watch).module == "Poisoned"
    assert list(watch.recorder.builder.sample_steps) == [0, 500]   # step 0 sampled, step 500 the replay's record
    assert_named_at_log(lk107(watch), 500)
    assert watch.recorder.replay.replays == 1
    assert all(same(a, b) for a, b in zip(plain_losses, losses)) and len(losses) == 503
    assert losses[499].isfinite() and losses[500].isnan()
    assert all(same(plain_state[k], state[k]) for k in plain_state)
    assert no_leaky_left() == [] and not model._forward_pre_hooks


def test_replay_with_dropout_and_batchnorm_reproduces_the_step():
    """The replay starts from the random state of the original call (the same dropout mask),
    and batch norm's running statistics and counter are as the step left them."""
    SEEN.clear()
    plain_losses, plain_state, _, _ = run(301, poison_at=300, noisy=True, every=None)
    assert len(SEEN) == 1
    SEEN.clear()
    losses, state, watch, _ = run(301, poison_at=300, noisy=True)
    assert len(SEEN) == 2 and SEEN[0] == SEEN[1]   # the step's forward, then its replay: same values
    assert_named_at_log(lk107(watch), 300)
    assert all(same(a, b) for a, b in zip(plain_losses, losses))
    assert all(same(plain_state[k], state[k]) for k in plain_state)
    assert "norm.running_mean" in state and "norm.num_batches_tracked" in state
    assert int(state["norm.num_batches_tracked"]) == 301
    assert no_leaky_left() == []


def test_the_random_state_is_kept_only_for_a_root_that_draws_random_numbers():
    """Dropout draws: its calls keep the random state. Without it, none is copied (5 KB a call)."""
    for noisy in (True, False):
        torch.manual_seed(0)
        model = Poisoned(noisy)
        with leaky.watch(every=1000) as watch:
            kept = []
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            for step in range(4):
                loss = F.cross_entropy(model(torch.rand(16, 8)), torch.randint(0, 3, (16,)))
                kept += [call.cpu_state is not None for call in watch.recorder.replay.calls]
                opt.zero_grad()
                loss.backward()
                opt.step()
        assert (id(model) in watch.recorder.replay.random) == noisy
        assert kept == [noisy] * 3   # steps 1-3, unsampled: one root call each


def test_a_healthy_run_replays_nothing_and_is_bit_identical():
    plain_losses, plain_state, _, _ = run(120, poison_at=None, noisy=True, every=None)
    losses, state, watch, model = run(120, poison_at=None, noisy=True, every=50)
    assert watch.recorder.replay.replays == 0 and watch.recorder.replay.skipped is None
    assert not [f for f in watch.report.findings if f.code == "LK107"]
    assert all(torch.equal(a, b) for a, b in zip(plain_losses, losses))
    assert all(torch.equal(plain_state[k], state[k]) for k in plain_state)
    assert no_leaky_left() == [] and not model._forward_pre_hooks


def _failing_replay(call, observed):
    with observed():
        raise RuntimeError("replay failed on purpose")


def test_a_failing_replay_leaves_nothing_behind(monkeypatch):
    """Strict (the suite): leaky's error comes out of backward(); every hook is gone after."""
    monkeypatch.setattr(replay_module, "_replay_one", _failing_replay)
    torch.manual_seed(0)
    model = Poisoned()
    with pytest.raises(RuntimeError, match="on purpose"):
        with leaky.watch(every=1000):
            train(model, 10, poison_at=5)
    assert no_leaky_left() == [] and not model._forward_pre_hooks


def test_a_failing_replay_does_not_stop_training(monkeypatch):
    """Not strict (a user's run): leaky stops observing with a warning; training goes on, unchanged."""
    monkeypatch.setattr(replay_module, "_replay_one", _failing_replay)
    plain_losses, plain_state, _, _ = run(10, poison_at=5, every=None)
    with pytest.warns(RuntimeWarning, match="on purpose"):
        losses, state, watch, model = run(10, poison_at=5, config=AuditConfig(steps=None, strict=False))
    assert watch.recorder.error is not None
    assert all(same(a, b) for a, b in zip(plain_losses, losses)) and len(losses) == 10
    assert all(same(plain_state[k], state[k]) for k in plain_state)
    assert no_leaky_left() == [] and not model._forward_pre_hooks


def test_parameters_already_nan_are_not_blamed_on_a_replayed_op():
    """A NaN that an update put in the weights (not born in this forward): no replay, and
    LK205 says that the weights were already non-finite at the step whose loss was NaN."""
    model, opt, gen = _poisoned()
    with leaky.watch(every=1000) as watch:
        for step in range(8):
            x = torch.rand(16, 8, generator=gen)
            loss = F.cross_entropy(model(x), torch.randint(0, 3, (16,), generator=gen))
            opt.zero_grad()
            loss.backward()
            if step == 4:
                model.fc1.weight.grad[0, 0] = float("nan")   # the update makes the weights NaN
            opt.step()
    assert watch.recorder.replay.replays == 0
    assert watch.recorder.replay.skipped == "the parameters were already non-finite at step 5"
    assert not [f for f in watch.report.findings if f.code == "LK107"]   # no reader of the weights blamed
    (diverging,) = [f for f in watch.report.findings if f.code == "LK205"]
    assert diverging.step == 5 and diverging.evidence["weights_nonfinite_at"] == 5
    assert "weights were already non-finite when step 5's forward ran" in diverging.message
    assert no_leaky_left() == []


def test_a_model_saved_or_copied_during_the_watch_takes_no_hook_along():
    """torch.save(model) and copy.deepcopy(model) on an unsampled step: neither holds the
    replay's pre-hook. The file loads under `weights_only=True` with only the model's own
    classes allowed (as pytorch/examples' word_language_model loads its checkpoint: a
    leaky function in it failed that load), and the copy keeps nothing."""
    torch.manual_seed(0)
    model = Poisoned(noisy=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with leaky.watch(every=1000) as watch:
        for step in range(4):
            loss = F.cross_entropy(model(torch.rand(16, 8)), torch.randint(0, 3, (16,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 2:
                buffer = io.BytesIO()
                torch.save(model, buffer)
                snapshot = copy.deepcopy(model)
                snapshot(torch.rand(16, 8))
                assert [call.module for call in watch.recorder.replay.calls] == []
    assert no_leaky_left() == [] and not model._forward_pre_hooks
    buffer.seek(0)
    with torch.serialization.safe_globals(list({type(m) for m in model.modules()})):
        loaded = torch.load(buffer, weights_only=True)
    assert not loaded._forward_pre_hooks and not loaded._forward_pre_hooks_with_kwargs
    assert not snapshot._forward_pre_hooks and not snapshot._forward_pre_hooks_with_kwargs
    assert all(torch.equal(a, b) for a, b in zip(loaded.parameters(), snapshot.parameters()))   # both at step 2


class Head(nn.Module):
    """A second model, run on the first one's output: a sqrt of a value the poison makes negative."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, h, poison):
        return self.fc(torch.sqrt(h.tanh() + 2 + poison))   # the NaN's birth in the head


@pytest.mark.parametrize("poisoned", ["body", "head"])
def test_two_models_in_turn_the_one_whose_forward_made_the_nan_is_named(poisoned):
    """Two root models, the second fed the first's output: each kept call is replayed in
    order, so a NaN of the first is named there (not where the second reads it), and a NaN
    of the second is named in the second."""
    torch.manual_seed(0)
    body, head = Poisoned(), Head()
    opt = torch.optim.SGD([*body.parameters(), *head.parameters()], lr=0.05)
    gen = torch.Generator().manual_seed(1)
    with leaky.watch(every=1000) as watch:
        for step in range(203):
            x = torch.rand(16, 8, generator=gen)
            poison = torch.zeros(16, 1)
            if step == 200:
                (x if poisoned == "body" else poison)[3, 0] = -100.0
            loss = F.cross_entropy(head(body(x), poison), torch.randint(0, 3, (16,), generator=gen))
            opt.zero_grad()
            loss.backward()
            opt.step()
    finding = lk107(watch)
    assert finding.step == 200 and watch.recorder.replay.replays == 1
    assert (finding.op, finding.module) == (("log", "body") if poisoned == "body" else ("sqrt", "head"))
    assert no_leaky_left() == [] and not body._forward_pre_hooks and not head._forward_pre_hooks


def test_the_replay_runs_under_the_autocast_the_step_ran_under():
    """A forward under torch.autocast (bfloat16 on the CPU) replays under it too, though the
    replay runs at backward(), outside the script's autocast block: the same values."""
    SEEN.clear()
    model, opt, gen = _poisoned()
    with leaky.watch(every=1000) as watch:
        for step in range(6):
            x = torch.rand(16, 8, generator=gen)
            if step == 4:
                x[3, 0] = -100.0
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            loss = F.cross_entropy(out.float(), torch.randint(0, 3, (16,), generator=gen))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert len(SEEN) == 2 and SEEN[0] == SEEN[1]
    assert_named_at_log(lk107(watch), 4)


def _poisoned():
    """The Poisoned model from seed 0, its SGD and the data's generator."""
    torch.manual_seed(0)
    model = Poisoned()
    return model, torch.optim.SGD(model.parameters(), lr=0.05), torch.Generator().manual_seed(1)


def test_a_model_scripted_during_the_watch_compiles_and_a_later_nan_is_still_named():
    """torch.jit.script(model) on an unsampled step: TorchScript compiles a module's forward
    pre-hooks and failed on the replay's; the hook comes off first and is put back at the
    step's end, so a forward NaN after it is still replayed and named."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    with leaky.watch(every=1000) as watch:
        for step in range(8):
            x = torch.rand(16, 8, generator=gen)
            if step == 6:
                x[3, 0], x[3, 1] = float("inf"), float("-inf")   # inf * a - inf * b: a NaN born in the first linear
            loss = F.cross_entropy(model(x), torch.randint(0, 3, (16,), generator=gen))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 2:
                assert model._forward_pre_hooks   # the replay's hook is on the root
                scripted = torch.jit.script(model)
                assert torch.equal(scripted(x), model(x))
    assert watch.recorder.replay.replays == 1
    (nan,) = [f for f in watch.report.findings if f.code == "LK107"]
    assert nan.step == 6 and nan.evidence["phase"] == "forward"
    assert no_leaky_left() == [] and not model._forward_pre_hooks
