"""LK205 loss-diverging on hand-built stats: stats that must trigger it and stats that a naive
rule would misread but that must not (ruff-style fixtures, no training run).
tests/unit/checks/test_loss_judgement.py has more (whose loss, moving targets)."""
from __future__ import annotations

import math

from leaky.finding import Severity
from leaky.testing import optimizer, series, stats
from tests.check_cases import cause, fires, quiet


# -- LK205 loss-diverging ------------------------------------------------------------------
RISING = [0.5 + 0.03 * i for i in range(40)]


def _curve(losses):
    return stats(steps=len(losses), series=series(losses=losses), optimizers=(optimizer(),))


def test_lk205_a_rising_loss_points_at_the_update_ratio_that_drives_it():
    high = cause("LK202", Severity.ERROR, module="fc", op=None, line=100, evidence={"direction": "high"})
    finding = fires("LK205", _curve(RISING), causes=(high,))
    assert (finding.severity, finding.module, finding.source.line, finding.step) == (Severity.WARNING, "fc", 100, 39)
    # start and end: the means of the first and last 4 steps (a tenth, at least 3)
    assert math.isclose(finding.evidence["loss_start"], 0.545) and math.isclose(finding.evidence["loss_end"], 1.625)
    assert "rose from 0.545 to" in finding.message and "over 40 steps" in finding.message
    assert finding.evidence["explained_by"] == ["LK202"] and finding.fix == "fix for LK202"
    # a learning rate too low does not explain a rising loss
    low = cause("LK202", Severity.WARNING, module="fc", op=None, line=100, evidence={"direction": "low"})
    unexplained = fires("LK205", _curve(RISING), causes=(low,))
    assert unexplained.evidence["explained_by"] == [] and unexplained.module is None


def test_lk205_a_loss_that_overflows_is_an_error():
    finding = fires("LK205", _curve(RISING[:30] + [math.inf] * 10))
    assert (finding.severity, finding.step, finding.evidence["nonfinite_step"]) == (Severity.ERROR, 30, 30)


def test_lk205_a_mild_rise_and_a_short_run_are_quiet():
    quiet("LK205", _curve([1.0 + 0.008 * i for i in range(40)]))   # 1.28×: below loss_rise_factor (1.5)
    quiet("LK205", _curve([0.5 + 0.3 * i for i in range(10)]))     # fewer steps than loss_min_steps (20)


# -- a trust-region policy objective, on a real model ---------------------------------------
def _actor_critic(clipped: bool, steps: int = 64, lr: float = 3e-4):
    """A PPO-style update on synthetic rollouts: every 4 steps a new rollout, whose returns
    grow as an improving agent's do (the value loss's targets), advantages normalised per
    batch. `clipped`: PPO's clipped surrogate (a clamp set against its own unclipped self);
    else a plain policy-gradient term. Returns the audit's LK205 findings."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    import leaky

    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(4, 32), nn.Tanh())
    actor, critic = nn.Linear(32, 2), nn.Linear(32, 1)
    params = [*body.parameters(), *actor.parameters(), *critic.parameters()]
    opt = torch.optim.Adam(params, lr=lr, eps=1e-5)
    with leaky.audit(steps=steps) as run:
        for step in range(steps):
            if step % 4 == 0:   # a new rollout from the policy being trained
                obs = torch.randn(64, 4)
                with torch.no_grad():
                    old = F.log_softmax(actor(body(obs)), -1)
                actions = torch.randint(0, 2, (64,))
                returns = (10.0 + 0.5 * step) * (1.0 + 0.1 * torch.randn(64))
                adv = torch.randn(64)
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            h = body(obs)
            logp = F.log_softmax(actor(h), -1).gather(1, actions[:, None]).squeeze(1)
            ratio = (logp - old.gather(1, actions[:, None]).squeeze(1)).exp()
            if clipped:
                policy = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.2)).mean()
            else:
                policy = (-adv * logp).mean()
            value = 0.5 * ((critic(h).squeeze(1) - returns) ** 2).mean()
            loss = policy + 0.5 * value
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()
    return [f for f in run.report.findings if f.code == "LK205"]


def test_lk205_a_ppo_loss_rising_with_its_returns_is_info_and_a_plain_objective_s_is_not():
    """The returns grow 10 → 41.5 over the rollouts, so the value loss rises (the critic,
    clipped to 0.5 a step, trails them): with PPO's clipped surrogate the rise is said as info
    (the objective moves with each rollout); the same rise without the trust region, a
    regression onto targets leaky cannot tell from a fixed dataset's, stays a warning."""
    (ppo,) = _actor_critic(clipped=True)
    assert ppo.severity is Severity.INFO and ppo.evidence["on_policy"] and ppo.cause is None
    assert "trust-region policy objective" in ppo.message and "rose from" in ppo.message
    (plain,) = _actor_critic(clipped=False)
    assert plain.severity is Severity.WARNING and "on_policy" not in plain.evidence


# The first 20 losses of a Hugging Face Trainer fine-tuning a tiny BERT on a learnable task
# (a helper's sweep; the run reached 96% accuracy), with its linear warmup over 10 steps from 0.
HF_WARMUP_LOSSES = [0.691, 0.692, 0.7007, 0.6944, 0.6954, 0.6947, 0.6917, 0.6854, 0.6689, 0.6811, 0.6943, 0.6547,
                    0.669, 0.6506, 0.6762, 0.6296, 0.7585, 0.7789, 0.7896, 0.6249]
HF_WARMUP_LRS = [0.0, 1e-4, 2e-4, 3e-4, 4e-4, 5e-4, 6e-4, 7e-4, 8e-4, 9e-4, 1e-3, 9.889e-4, 9.778e-4, 9.667e-4,
                 9.556e-4, 9.444e-4, 9.333e-4, 9.222e-4, 9.111e-4, 9e-4]


def test_lk205_swings_that_grow_with_a_warming_up_rate_are_not_an_oscillation():
    """The swings of the last quarter are 20× the first's because the first steps were taken
    at a rate near 0: no oscillation while the rate warms up. The same losses at a constant
    rate are judged as before (a warning)."""
    warming = stats(steps=20, series=series(losses=HF_WARMUP_LOSSES, lr=HF_WARMUP_LRS), optimizers=(optimizer(),))
    quiet("LK205", warming)
    flat = stats(steps=20, series=series(losses=HF_WARMUP_LOSSES, lr=1e-3), optimizers=(optimizer(),))
    assert fires("LK205", flat).evidence["swing_growth"] > 10
