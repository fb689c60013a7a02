"""The watch's overhead budget (record/budget.py), driven by a fake clock: which steps it
samples, what it says it cost, and when the monitor takes the gradient norm on a schedule.

The simulated run: a plain step takes `plain` seconds; an unsampled step adds the monitor's
own time (`own` seconds, `norm` of them the gradient norm when taken); a sampled step adds
`extra` seconds (of them `end` timed at its end). Nothing here depends on the machine."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.record.budget import DEFAULT_EVERY, NORM_MOST, Budget, Schedule
from tests.conftest import no_leaky_left


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(schedule, steps, plain=1.0, own=0.0, norm=0.0, extra=50.0, end=0.0, first_extra=None,
             plain_at=None):
    """Run `steps` steps through `schedule`; returns (sampled step indices, the true overhead:
    all extra time over all plain time)."""
    clock = schedule.clock
    sampled_steps, extra_total, plain_total = [], 0.0, 0.0
    sampled = True   # step 0: the recorder observes it from its entry
    for step in range(steps):
        p = plain_at(step) if plain_at else plain
        if sampled:
            e = first_extra if (step == 0 and first_extra is not None) else extra
            if step == 0:
                clock.now += 7.0   # the script's set-up before its first forward: not the step's
                schedule.started()
            clock.now += p + e - end
            schedule.end_work(end)
            clock.now += end
            sampled_steps.append(step)
            extra_total += e
        else:
            took_norm = schedule.norm_due(step)
            spent = own - norm + (norm if took_norm else 0.0)
            clock.now += p + spent
            schedule.own(spent)
            if took_norm:
                schedule.own_norm(norm)
            extra_total += spent
        plain_total += p
        schedule.step_ended(step, sampled)
        sampled = schedule.sample(step + 1)
    return sampled_steps, extra_total / plain_total


def test_a_sampled_step_50_times_a_plain_one_is_spaced_to_keep_the_budget():
    budget = Budget(0.02, clock=Clock())
    sampled, true = simulate(budget, 20000, extra=50.0)
    gaps = [b - a for a, b in zip(sampled, sampled[1:])]
    assert len(sampled) >= 5
    # 50 / 0.02 = 2500 steps of credit pay for one sampled step; a step is taken when the
    # credit already covers it, so the first wait pays for the first step and the second
    assert 4950 <= gaps[0] <= 5050 and all(2450 <= gap <= 2550 for gap in gaps[1:]), gaps
    assert true <= 0.02 + 50.0 / 20000
    assert budget.overhead() == pytest.approx(true, rel=1e-6)


@pytest.mark.parametrize("extra", [2.0, 10.0, 200.0])
def test_the_spacing_follows_the_cost_of_a_sampled_step(extra):
    budget = Budget(0.02, clock=Clock())
    expected = extra / 0.02
    steps = max(40000, int(6 * expected))
    sampled, true = simulate(budget, steps, extra=extra)
    gaps = [b - a for a, b in zip(sampled, sampled[1:])]
    assert abs(gaps[0] - 2 * expected) <= max(0.1 * expected, 20), (extra, gaps)
    assert gaps[1:] and all(abs(gap - expected) <= max(0.1 * expected, 20) for gap in gaps[1:]), (extra, gaps)
    assert true <= 0.02 + extra / steps


def test_a_first_step_with_one_time_probes_is_paid_for_before_the_next():
    """Its extra is timed from the model's first call (the script's set-up before it is not
    counted), and the next sampled step waits until the budget has paid for it."""
    budget = Budget(0.02, clock=Clock())
    sampled, true = simulate(budget, 30000, extra=10.0, end=2.0, first_extra=110.0)
    # the wait pays for the first step (110) and, in advance, for the second, whose cost is
    # taken to be the first's until one without the one-time probes is measured
    assert sampled[:3] == [0, pytest.approx(220.0 / 0.02, abs=30), pytest.approx(220.0 / 0.02 + 10 / 0.02, abs=30)]
    assert budget.first_extra() == pytest.approx(110.0) and budget.sampled_extra() == pytest.approx(10.0)
    assert true <= 0.02 + 10.0 / 30000
    assert budget.overhead() == pytest.approx(true, rel=1e-6)


def test_a_first_step_measured_below_a_noisy_plain_step_is_charged_at_least_its_timed_end_work():
    """Noise lifts the plain steps' median above the first step's whole interval: its extra
    is then at least what leaky timed at its end, and the next step is not sampled at once."""
    budget = Budget(0.02, clock=Clock())
    sampled, _ = simulate(budget, 3000, plain_at=lambda step: 1.0 if step == 0 else 40.0,
                          extra=10.0, end=6.0, first_extra=8.0)
    assert budget.first_extra() == pytest.approx(6.0)   # interval 9 - plain 40 < 0: its end work instead
    assert sampled[1] >= 6.0 / (0.02 * 40.0)


def test_a_first_step_without_a_module_call_is_charged_its_end_work_and_the_later_steps_extra():
    budget = Budget(0.02, clock=Clock())
    budget.started = lambda: None   # a functional model: no module's forward to time it from
    sampled, true = simulate(budget, 30000, extra=10.0, end=2.0)
    assert budget.first_end == pytest.approx(2.0)
    # its end work (2.0) plus the later steps' forward and backward (8.0)
    assert budget.first_extra() == pytest.approx(10.0)
    assert len(sampled) >= 10


def test_the_monitor_takes_the_norm_on_a_schedule_when_it_would_use_the_budget():
    # the norm costs 5% of a plain step: over the 2% budget by itself
    budget = Budget(0.02, clock=Clock())
    sampled, true = simulate(budget, 20000, own=0.055, norm=0.05, extra=20.0)
    assert 1 < budget.norm_every <= NORM_MOST
    # its share of the budget: the rest (0.005) plus the norm spread over norm_every steps
    assert 0.005 + 0.05 / budget.norm_every <= 0.5 * 0.02 + 1e-12
    assert true <= 0.02 + 0.055 * 16 / 20000 + 20.0 / 20000   # the steps before the first plan ran it every step
    assert len(sampled) > 3


def test_a_monitor_that_fits_keeps_the_norm_every_step():
    budget = Budget(0.02, clock=Clock())
    simulate(budget, 5000, own=0.004, norm=0.003, extra=5.0)
    assert budget.norm_every == 1


def test_a_monitor_over_the_whole_budget_samples_no_more_and_says_so():
    budget = Budget(0.02, clock=Clock())
    sampled, true = simulate(budget, 10000, own=0.05, norm=0.0, extra=5.0)
    assert sampled == [0]
    summary = budget.summary()
    assert summary["measured"] > 0.02 and summary["monitor_ms"] == pytest.approx(50.0)


def test_plain_steps_that_change_move_the_spacing():
    budget = Budget(0.02, clock=Clock())
    # the plain step doubles at step 20000 (a longer sequence, say): the same extra is then
    # paid for in half the steps
    sampled, true = simulate(budget, 40000, extra=20.0, plain_at=lambda step: 1.0 if step < 20000 else 2.0)
    early = [b - a for a, b in zip(sampled, sampled[1:]) if b < 20000][1:]
    late = [b - a for a, b in zip(sampled, sampled[1:]) if a > 21000]
    assert early and late
    assert max(late) < min(early)


def test_an_evaluation_every_500_steps_does_not_move_the_plain_step():
    budget = Budget(0.02, clock=Clock())
    simulate(budget, 5000, extra=5.0, plain_at=lambda step: 30.0 if step % 500 == 499 else 1.0)
    assert budget.plain_step() == pytest.approx(1.0)


def test_an_explicit_interval_samples_every_nth_step_and_measures_what_it_costs():
    schedule = Schedule(10, clock=Clock())
    sampled, true = simulate(schedule, 1000, own=0.01, extra=3.0)
    assert sampled == list(range(0, 1000, 10))
    summary = schedule.summary()
    assert summary["schedule"] == "every" and summary["every"] == 10 and summary["budget"] is None
    assert summary["measured"] == pytest.approx(true, rel=1e-6)
    assert summary["sampled_extra_ms"] == pytest.approx(3000.0)


def test_rounds_of_several_optimizers_are_sampled_together():
    budget = Budget(0.02, clock=Clock())
    clock = budget.clock
    taken = []
    sampled = True
    for step in range(20000):
        clock.now += 1.0 + (10.0 if sampled else 0.0)
        if sampled:
            taken.append(step)
        budget.step_ended(step, sampled)
        sampled = budget.sample(step + 1, round_steps=2)
    later = taken[1:]
    assert later and all(b == a + 1 for a, b in zip(later[::2], later[1::2]))


def test_with_several_ranks_the_budget_becomes_a_fixed_interval():
    ranks = [False]
    budget = Budget(0.02, clock=Clock(), several_ranks=lambda: ranks[0])
    # the process group comes up at step 50 (the script's init_process_group)
    sampled, _ = simulate(budget, 400, extra=5.0, plain_at=lambda step: ranks.__setitem__(0, step >= 50) or 1.0)
    assert budget.summary()["schedule"] == "every" and budget.every == DEFAULT_EVERY
    assert "ranks" in budget.summary()["reason"]
    assert sampled == [0, 100, 200, 300]


def test_the_budget_is_a_share_between_0_and_1():
    with pytest.raises(ValueError):
        Budget(0.0)
    with pytest.raises(ValueError):
        Budget(2.0)


def test_a_watch_with_a_fake_clock_keeps_its_budget_on_a_real_model():
    """Through the recorder: a real model, backward and optimizer; the clock moves only in the
    loop (a plain step is 1.0, a sampled step 25.0 more), so leaky's own time reads as 0."""
    clock = Clock()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    steps = 4000
    with leaky.Watch(clock=clock) as run:
        for _ in range(steps):
            sampled = run.recorder.observing
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            clock.now += 1.0 + (25.0 if sampled else 0.0)
            opt.step()
    sampled = list(run.recorder.builder.sample_steps)
    overhead = run.report.run["overhead"]
    assert sampled[0] == 0 and 2 <= len(sampled) <= 4, sampled
    # 25 / 0.02 = 1250 steps pay for a sampled step; the first wait, for the first two
    assert 2450 <= sampled[1] <= 2550 and all(1200 <= b - a <= 1300 for a, b in zip(sampled[1:], sampled[2:])), sampled
    assert overhead["schedule"] == "budget" and overhead["budget"] == 0.02
    assert overhead["sampled_steps"] == len(sampled) and overhead["steps"] == steps
    assert overhead["plain_step_ms"] == pytest.approx(1000.0)
    assert overhead["measured"] <= 0.02 + 25.0 / steps
    assert no_leaky_left() == []


def test_an_evaluation_before_the_first_step_is_not_the_first_steps_cost():
    """nanoGPT evaluates at iteration 0, under no_grad, before its first training forward: the
    first step is timed from the training forward (grad on, the model in training mode)."""
    clock = Clock()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    with leaky.Watch(clock=clock) as run:
        for step in range(200):
            if step == 0:
                model.eval()
                with torch.no_grad():
                    model(x)
                clock.now += 500.0   # a long evaluation
                model.train()
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            clock.now += 1.0 + (25.0 if step == 0 else 0.0)
            opt.step()
    assert run.recorder.schedule.first_extra() == pytest.approx(25.0)


@pytest.mark.parametrize("clips", [True, False])
def test_with_the_norm_on_a_schedule_a_scripts_clip_gives_the_norm_of_the_other_steps(clips):
    """The monitor takes its own norm every 4th step here; on the others a script that clips
    hands it the norm of the clipped gradients (the clip's result, scaled as it scaled them)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    truth = []
    with leaky.Watch(every=10**6) as run:
        run.recorder.schedule.norm_every = 4
        for step in range(24):
            x, y = torch.randn(16, 8) * (1 + step), torch.randint(0, 2, (16,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if clips:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.3)
            truth.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item())
            opt.step()
    rows = {row.step: row.grad_norm for row in run.recorder.builder.series}
    for step in range(1, 24):   # step 0 is sampled: its norm comes from the fold
        if clips or step % 4 == 0:
            assert rows[step] == pytest.approx(truth[step], rel=1e-5), step
        else:
            assert rows[step] is None, step
    assert run.report.run["overhead"]["norms_from_clip"] == (18 if clips else 0)   # 23 unsampled steps, 5 due
    if clips:
        assert max(truth) == pytest.approx(0.3, rel=1e-4)   # it did clip
    assert no_leaky_left() == []


def test_an_optimizer_first_stepping_on_an_unsampled_step_is_looked_at_in_the_next_round():
    """A GAN: the discriminator steps at step 0 (sampled), the generator first at step 1. The
    budget has no credit for a second round in 40 steps, yet the generator's round is
    observed, and its parameters are not reported as receiving no gradient."""
    clock = Clock()
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4)), nn.Sequential(nn.Linear(4, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters(), 1e-3), torch.optim.Adam(disc.parameters(), 1e-3)
    with leaky.Watch(clock=clock) as run:
        for _ in range(20):
            real, z = torch.randn(8, 4), torch.randn(8, 4)
            opt_d.zero_grad()
            loss_d = F.softplus(-disc(real)).mean() + F.softplus(disc(gen(z).detach())).mean()
            loss_d.backward()
            clock.now += 1.0 + (25.0 if run.recorder.observing else 0.0)
            opt_d.step()
            opt_g.zero_grad()
            loss_g = F.softplus(-disc(gen(z))).mean()
            loss_g.backward()
            clock.now += 1.0 + (25.0 if run.recorder.observing else 0.0)
            opt_g.step()
    sampled = list(run.recorder.builder.sample_steps)
    assert sampled[0] == 0 and len(sampled) <= 3 and any(step % 2 == 1 for step in sampled), sampled
    assert not run.report.by_code("LK108"), [f.message for f in run.report.by_code("LK108")]


def _td3_rounds(watch, clock=None) -> list[list[str]]:
    """CleanRL TD3's order of optimizer steps (the critic at every environment step, the actor
    at every second: c a c c a c c a ...) under `watch`; the sampled rounds, as the optimizers
    that stepped in each ('c', 'a')."""
    torch.manual_seed(0)
    actor, critic = nn.Linear(3, 1), nn.Linear(4, 1)
    opt_a, opt_c = torch.optim.Adam(actor.parameters(), 1e-3), torch.optim.Adam(critic.parameters(), 1e-3)
    seen = []   # (which optimizer, whether that step was observed in detail)
    with watch as run:
        for env_step in range(40):
            s = torch.randn(8, 3)
            q = critic(torch.cat([s, torch.randn(8, 1)], 1))
            opt_c.zero_grad()
            F.mse_loss(q, torch.randn(8, 1)).backward()
            seen.append(("c", run.recorder.observing))
            if clock is not None:
                clock.now += 1.0 + (25.0 if run.recorder.observing else 0.0)
            opt_c.step()
            if env_step % 2 == 0:
                opt_a.zero_grad()
                (-critic(torch.cat([s, actor(s)], 1)).mean()).backward()
                seen.append(("a", run.recorder.observing))
                if clock is not None:
                    clock.now += 1.0 + (25.0 if run.recorder.observing else 0.0)
                opt_a.step()
    rounds, current = [], []
    for kind, observed in seen + [("", False)]:
        if observed:
            current.append(kind)
        elif current:
            rounds, current = rounds + [current], []
    assert no_leaky_left() == []
    return rounds


def test_a_round_waits_for_an_optimizer_that_steps_every_other_environment_step():
    """A round of two steps (one per optimizer) was `c c` as often as not under TD3's order.
    A round is now as long as the actor's gap (3), and every sampled round holds its step."""
    rounds = _td3_rounds(leaky.Watch(every=10))
    assert len(rounds) >= 4 and all("a" in r and "c" in r for r in rounds[1:]), rounds


def test_a_new_optimizer_s_round_lasts_until_it_steps_again():
    """Under the budget: step 0 (the critic's) is sampled; the actor first steps at step 1,
    unsampled, so the next round is taken whatever the credit. Its gap is not known yet, and
    the round goes on until it has stepped in it (c c a), not for two steps (c c)."""
    clock = Clock()
    rounds = _td3_rounds(leaky.Watch(clock=clock), clock)
    assert rounds[0] == ["c"] and len(rounds) >= 2 and "a" in rounds[1], rounds
