"""LK106 by role: a dead zone between the model's output and the loss drops whole outputs.

Real models, real backward passes and optimizers: the share is checked against plain
torch (the TD errors outside the clamp's bounds, counted in the training loop itself), the
role against where the clamp sits. Hand-built stats pin the thresholds and the message.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.config import AuditConfig
from leaky.demo import audit_example
from leaky.finding import Severity
from leaky.testing import op, source, stats
from leaky.zoo import EXAMPLES, marker_line
from leaky.zoo._base import batches, data_generator
from leaky.zoo.karpathy import transitions
from tests.check_cases import fires, quiet


def _zone_ops(audit_stats, name: str = "clamp"):
    return [o for o in audit_stats.ops if o.op == name and o.steps]


# -- the broken model: a clipped TD error whose share falls as it trains -------------------------
def _dqn(steps: int, loss_of, seed: int = 0):
    """The loop of the zoo's dqn-clamped-td-small-rewards, counting |TD| > 1 in plain torch."""
    torch.manual_seed(seed)
    qnet = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    target_net = copy.deepcopy(qnet)
    s_all, a_all, r_all, s2_all, done_all = transitions(1024, data_generator(seed), reward_scale=1.0, noise=0.5)
    opt = torch.optim.Adam(qnet.parameters(), lr=1e-3)
    outside = []
    with leaky.audit(steps=steps) as audit:
        for step in range(steps):
            rows = batches(1024, 64, step)
            q = qnet(s_all[rows]).gather(1, a_all[rows][:, None]).squeeze(1)
            with torch.no_grad():
                target = r_all[rows] + 0.9 * (1.0 - done_all[rows]) * target_net(s2_all[rows]).max(dim=1).values
                outside.append((q - target).abs().gt(1.0).float().mean().item())
            loss = loss_of(q, target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit, outside


def _clipped(q, target):
    return (q - target).clamp(-1.0, 1.0).pow(2).mean()


@pytest.mark.parametrize("steps", [20, 100])
def test_a_clipped_td_error_below_the_hidden_threshold_is_found_on_the_loss_path(steps):
    audit, outside = _dqn(steps, _clipped)
    (zone,) = _zone_ops(audit.stats)
    window = sum(outside) / len(outside)
    assert zone.loss_path and zone.zero_steps == steps
    assert zone.zeroed_share == pytest.approx(window, abs=1e-6)          # plain torch's count, every step
    assert AuditConfig().dead_zone_loss_warning < window < AuditConfig().dead_zone_warning   # a hidden op: quiet
    assert outside[-1] < outside[0]                                        # it shrinks as Q fits
    (finding,) = audit.report.by_code("LK106")
    assert finding.severity is Severity.WARNING and finding.evidence["role"] == "loss_path"
    assert finding.source.line == _clipped.__code__.co_firstlineno + 1
    assert f"summed over all {steps} observed steps" in finding.message
    assert f"{100 * window:.0f}%" in finding.message and "between the model's output and the loss" in finding.message


def test_the_same_clamp_in_the_zoo_points_at_its_line():
    example = EXAMPLES["dqn-clamped-td-small-rewards"]
    (finding,) = audit_example(example, 20).by_code("LK106")
    assert finding.source.line == marker_line(example, "LK106-td-clamp")


def test_huber_on_the_same_td_errors_is_quiet():
    audit, outside = _dqn(20, F.smooth_l1_loss)
    assert sum(outside) / len(outside) > 0.1            # as many large TD errors: clipped to ±1, never zeroed
    assert audit.report.by_code("LK106") == []


def test_a_clamped_target_has_no_gradient_to_zero():
    def loss_of(q, target):
        return F.mse_loss(q, target.clamp(-1.0, 1.0))   # the target: computed under no_grad
    audit, _ = _dqn(20, loss_of)
    assert _zone_ops(audit.stats) == [] and audit.report.by_code("LK106") == []


# -- healthy look-alikes from the zoo: where the clamp sits decides -----------------------------
def _audit(name: str, steps: int = 60, seed: int = 0):
    with leaky.audit(steps=steps) as audit:
        EXAMPLES[name].run(steps=steps, seed=seed)
    return audit


@pytest.mark.parametrize("seed", [0, 1])
def test_a_hidden_clamp_above_the_loss_path_threshold_is_quiet(seed):
    audit = _audit("hidden-clamp", seed=seed)
    (zone,) = _zone_ops(audit.stats)
    assert not zone.loss_path                        # fc2 mixes every unit between it and the loss
    assert AuditConfig().dead_zone_loss_warning < zone.zeroed_share < AuditConfig().dead_zone_warning
    assert audit.report.by_code("LK106") == []


@pytest.mark.parametrize("seed", [0, 1])
def test_a_clamp_that_keeps_a_prediction_in_its_range_and_rarely_binds_is_quiet(seed):
    audit = _audit("clamped-output-range", seed=seed)
    (zone,) = _zone_ops(audit.stats)
    assert zone.loss_path
    assert zone.zeroed_share < 0.03                  # measured 0.4-2.5% over seeds 0-3 and 20-200 steps
    assert audit.report.by_code("LK106") == []


def test_a_masked_loss_keeps_the_hidden_threshold():
    """where(mask, err, 0) on the loss path zeroes the padded share on purpose."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with leaky.audit(steps=10) as audit:
        for _ in range(10):
            x, y = torch.randn(64, 4), torch.randn(64)
            mask = torch.arange(64) < 52                       # 12 of 64 padded: 19%
            err = (model(x).squeeze(-1) - y).pow(2)
            loss = torch.where(mask, err, torch.zeros_like(err)).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    (zone,) = _zone_ops(audit.stats, "where")
    assert zone.loss_path and zone.zeroed_share == pytest.approx(12 / 64)
    assert audit.report.by_code("LK106") == []


# -- hand-built stats ----------------------------------------------------------------------------
def _zone(name: str, share: float, loss_path: bool, **fields):
    return stats(steps=100, ops=(op(site=4, op=name, module=None, zeroed_share=share, nonzero_in=6400.0, steps=100,
                                   source=source(line=41), loss_path=loss_path, **fields),))


def test_unit_on_the_loss_path_a_tenth_is_a_warning_and_a_third_an_error():
    finding = fires("LK106", _zone("clamp", 0.1, True, detail={"low": -1.0, "high": 1.0}))
    assert (finding.severity, finding.source.line, finding.evidence["role"]) == (Severity.WARNING, 41, "loss_path")
    assert "clamp sets the gradient of 10% of the 6400 elements that reach the loss to exactly 0, summed over " \
           "all 100 observed steps" in finding.message
    assert fires("LK106", _zone("round", 0.3, True)).severity is Severity.ERROR


def test_unit_the_same_share_in_a_hidden_layer_or_a_mask_on_the_loss_path_is_quiet():
    quiet("LK106", _zone("clamp", 0.1, False))
    quiet("LK106", _zone("where", 0.1, True))
    quiet("LK106", _zone("clamp", 0.02, True))


def test_unit_a_share_counted_on_some_steps_says_so():
    finding = fires("LK106", _zone("clamp", 0.4, False, zero_steps=25))
    assert "summed over the 25 of its 100 observed steps whose zeros were counted" in finding.message
    assert finding.evidence["steps_counted"] == 25


# -- a trust region by design: PPO's clipped surrogate and clipped value loss ------------------
def test_ppo_clipping_set_against_its_unclipped_self_is_not_a_loss_path_dead_zone():
    torch.manual_seed(0)
    obs = torch.randn(512, 6)
    actions = torch.randint(0, 3, (512,))
    advantages = torch.randn(512)
    returns = torch.randn(512)
    actor = nn.Sequential(nn.Linear(6, 64), nn.Tanh(), nn.Linear(64, 3))
    critic = nn.Sequential(nn.Linear(6, 64), nn.Tanh(), nn.Linear(64, 1))
    with torch.no_grad():
        old_logp = torch.log_softmax(actor(obs), -1).gather(1, actions[:, None]).squeeze(1)
        old_values = critic(obs).squeeze(1)
    opt = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=3e-3)
    clip = 0.2
    with leaky.audit(steps=None) as audit:
        for epoch in range(8):                       # several epochs on one rollout: ratios leave [0.8, 1.2]
            for rows in torch.randperm(512).split(64):
                logp = torch.log_softmax(actor(obs[rows]), -1).gather(1, actions[rows, None]).squeeze(1)
                ratio = (logp - old_logp[rows]).exp()
                adv = advantages[rows]
                pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
                value = critic(obs[rows]).squeeze(1)
                clipped = old_values[rows] + torch.clamp(value - old_values[rows], -clip, clip)
                v_loss = 0.5 * torch.max((value - returns[rows]) ** 2, (clipped - returns[rows]) ** 2).mean()
                loss = pg_loss + 0.5 * v_loss
                opt.zero_grad()
                loss.backward()
                opt.step()
    clamps = _zone_ops(audit.stats)
    assert clamps and max(o.zeroed_share for o in clamps) > AuditConfig().dead_zone_loss_warning   # not vacuous
    assert all(o.detail.get("clipped_by") is not None for o in clamps)   # record/clipping.py: a trust region
    assert [f for f in audit.report.by_code("LK106") if f.severity is not Severity.INFO] == []
