"""LK106: a clamp set against its own unclipped value by a max/min is a pessimistic bound.

PPO's clipped surrogate max(−A·r, −A·clamp(r, 1 − ε, 1 + ε)) and its clipped value loss
max((v − R)², (v_old + clamp(v − v_old, −ε, ε) − R)²) zero the gradient, by design, where
the clipped branch is the larger loss and the clamp binds (record/clipping.py). Real tiny
models, real backward passes and optimizers: the share the clamp stopped is checked against
plain torch (the elements outside its bounds, counted in the loop), and its role against the
graph. Look-alikes that are real bugs (a clamped TD error with no unclipped counterpart, a
max against a constant or against another layer's output) stay loud.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.config import AuditConfig
from leaky.finding import Severity
from leaky.testing import op, source, stats
from tests.check_cases import fires

CLIP = 0.2
LOUD = (Severity.WARNING, Severity.ERROR)


def _clamps(audit):
    return [o for o in audit.stats.ops if o.op in ("clamp", "clip", "hardtanh") and o.steps]


def _loud(audit) -> list[str]:
    return [f.message for f in audit.report.by_code("LK106") if f.severity in LOUD]


def _rollout(n: int = 256, seed: int = 0):
    torch.manual_seed(seed)
    obs, actions = torch.randn(n, 6), torch.randint(0, 3, (n,))
    advantages = torch.randn(n)
    returns = 5.0 + 3.0 * torch.randn(n)          # far from the critic's first values: the value clip binds
    return obs, actions, advantages, returns


# the spellings of a value clip: the clamp, and the max that sets it against the unclipped loss
CLAMPS = {"clamp": lambda x: torch.clamp(x, -CLIP, CLIP), "clip": lambda x: x.clip(-CLIP, CLIP),
          "hardtanh": lambda x: F.hardtanh(x, -CLIP, CLIP)}
MAXES = {"torch.max": torch.max, "torch.maximum": torch.maximum, "Tensor.maximum": lambda a, b: a.maximum(b)}


def _value_clip(clamp, larger, steps: int = 24):
    """A critic trained with PPO's clipped value loss, several epochs over one rollout; returns
    the audit and the share of elements whose v − v_old left [−ε, ε] (plain torch)."""
    obs, _, _, returns = _rollout()
    critic = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
    with torch.no_grad():
        old_values = critic(obs).squeeze(1)
    opt = torch.optim.Adam(critic.parameters(), lr=1e-2)
    outside = []
    with leaky.audit(steps=steps) as audit:
        for step in range(steps):
            rows = torch.randperm(256)[:64]
            value = critic(obs[rows]).squeeze(1)
            clipped = old_values[rows] + clamp(value - old_values[rows])
            v_loss = 0.5 * larger((value - returns[rows]) ** 2, (clipped - returns[rows]) ** 2).mean()
            opt.zero_grad()
            v_loss.backward()
            opt.step()
            outside.append((value - old_values[rows]).abs().gt(CLIP).float().mean().item())
    return audit, sum(outside) / len(outside)


@pytest.mark.parametrize("clamp", CLAMPS)
def test_a_value_clip_that_binds_on_most_elements_is_info_by_design(clamp):
    audit, outside = _value_clip(CLAMPS[clamp], torch.max)
    assert outside > AuditConfig().dead_zone_error                     # not vacuous: it binds on most
    (zone,) = _clamps(audit)
    assert zone.detail["clipped_by"] is not None
    assert _loud(audit) == []
    (finding,) = audit.report.by_code("LK106")
    assert finding.severity is Severity.INFO and finding.evidence["by_design"] == "pessimistic-clip"
    assert "pessimistic bound (PPO-style clipping" in finding.message and "by design" in finding.message


@pytest.mark.parametrize("larger", MAXES)
def test_every_spelling_of_the_max_is_a_pessimistic_bound(larger):
    audit, outside = _value_clip(CLAMPS["clamp"], MAXES[larger], steps=12)
    assert outside > AuditConfig().dead_zone_error
    (zone,) = _clamps(audit)
    assert zone.zeroed_share > AuditConfig().dead_zone_error and zone.detail["clipped_by"] is not None
    assert _loud(audit) == []
    assert [f.severity for f in audit.report.by_code("LK106")] == [Severity.INFO]


def test_ppo_policy_and_value_clip_together_stay_quiet():
    """The clipped surrogate written both ways (max of the negated, min of the positive
    forms) beside the clipped value loss, on one agent, several epochs on one rollout."""
    obs, actions, advantages, returns = _rollout()
    actor = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 3))
    critic = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
    with torch.no_grad():
        old_logp = torch.log_softmax(actor(obs), -1).gather(1, actions[:, None]).squeeze(1)
        old_values = critic(obs).squeeze(1)
    opt = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=3e-2)
    outside = []
    with leaky.audit(steps=24) as audit:
        for epoch in range(6):
            for rows in torch.randperm(256).split(64):
                ratio = (torch.log_softmax(actor(obs[rows]), -1).gather(1, actions[rows, None]).squeeze(1)
                         - old_logp[rows]).exp()
                adv = advantages[rows]
                pg_max = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - CLIP, 1 + CLIP)).mean()
                pg_min = -torch.min(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv).mean()
                value = critic(obs[rows]).squeeze(1)
                clipped = old_values[rows] + torch.clamp(value - old_values[rows], -CLIP, CLIP)
                v_loss = 0.5 * torch.max((value - returns[rows]) ** 2, (clipped - returns[rows]) ** 2).mean()
                loss = 0.5 * (pg_max + pg_min) + 0.5 * v_loss
                opt.zero_grad()
                loss.backward()
                opt.step()
                outside.append((ratio - 1).abs().gt(CLIP).float().mean().item())
    clamps = _clamps(audit)
    assert len(clamps) == 3 and all(o.detail["clipped_by"] is not None for o in clamps)
    assert max(outside) > AuditConfig().dead_zone_loss_error          # the policy clip binds too
    assert max(o.zeroed_share for o in clamps) > AuditConfig().dead_zone_error
    assert _loud(audit) == []
    assert {f.severity for f in audit.report.by_code("LK106")} == {Severity.INFO}


# -- look-alikes that are real bugs --------------------------------------------------------------
def _regress(loss_of, steps: int = 12):
    """A small regressor whose outputs start far from its targets (a bias of 3, targets in [0, 1])."""
    torch.manual_seed(0)
    trunk = nn.Sequential(nn.Linear(6, 32), nn.Tanh())
    head_a, head_b = nn.Linear(32, 1), nn.Linear(32, 1)
    with torch.no_grad():
        head_a.bias.fill_(3.0)
    opt = torch.optim.Adam([*trunk.parameters(), *head_a.parameters(), *head_b.parameters()], lr=1e-3)
    x, y = torch.randn(128, 6), torch.rand(128)
    with leaky.audit(steps=steps) as audit:
        for _ in range(steps):
            h = trunk(x)
            loss = loss_of(head_a(h).squeeze(1), head_b(h).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit


LOOK_ALIKES = {
    # a clamped TD error: nothing sets it against its unclamped self
    "clamped error": lambda q, _, target: torch.clamp(target - q, -1, 1).pow(2).mean(),
    # a max against a constant: the clamp's zeros are not a bound against anything
    "max against zeros": lambda q, _, target: F.mse_loss(torch.max(q.clamp(0, 1), torch.zeros_like(q)), target),
    # a max against another layer's output: the other side does not carry the clamp's input
    "max against another head": lambda q, other, target: F.mse_loss(torch.max(q.clamp(0, 1), other), target),
}


@pytest.mark.parametrize("case", LOOK_ALIKES)
def test_a_clamp_not_set_against_its_unclipped_self_stays_loud(case):
    audit = _regress(LOOK_ALIKES[case])
    (zone,) = _clamps(audit)
    assert zone.loss_path and "clipped_by" not in zone.detail
    (finding,) = audit.report.by_code("LK106")
    assert finding.severity in LOUD and "pessimistic" not in finding.message


# -- hand-built stats ----------------------------------------------------------------------------
def test_unit_a_clamp_clipped_by_a_max_is_info_and_names_the_max():
    clamp = op(site=4, op="clamp", module=None, zeroed_share=0.59, nonzero_in=2506.0, steps=80, loss_path=True,
               source=source(line=90), detail={"low": -0.2, "high": 0.2, "clipped_by": 7})
    larger = op(site=7, op="max", module=None, source=source(line=91), steps=80)
    finding = fires("LK106", stats(steps=80, ops=(clamp, larger)))
    assert (finding.severity, finding.source.line) == (Severity.INFO, 90)
    assert "set against its own unclipped value by max at train.py:91" in finding.message
    assert "stopped 59% of the 2506 elements' gradient, summed over all 80 observed steps" in finding.message
    loud = fires("LK106", stats(steps=80, ops=(op(site=4, op="clamp", module=None, zeroed_share=0.59,
                                                 nonzero_in=2506.0, steps=80, loss_path=True), larger)))
    assert loud.severity is Severity.ERROR
