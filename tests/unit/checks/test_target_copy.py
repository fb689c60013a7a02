"""A target network copied from the trained model is a moving target from the first step.

DDPG, TD3 and SAC regress a critic onto `r + γ·Q_target(s', a')`, where Q_target starts as a
copy of the critic (`load_state_dict`) and follows it. The TD target's mean moves as the
critic learns (here from -2.97 at step 0 to -5.14 at step 199, toward r / (1 − γ)), so the
first loss against Var(t) says nothing about the output layer (LK307 leaves moving targets
alone). A sync shows the target network only after the first step, but a watch judges at
its first sampled step and an audit may be that short: the copy itself is the evidence.
A frozen backbone that is no copy (a regression head on fixed features) is still judged."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.finding import Severity


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 1)

    def forward(self, x, a):
        x = F.relu(self.fc1(torch.cat([x, a], 1)))
        return self.fc3(F.relu(self.fc2(x)))


def _transitions():
    torch.manual_seed(0)
    obs, act = torch.randn(4096, 3), torch.rand(4096, 1) * 4 - 2
    reward = -(obs.pow(2).sum(1) + 0.1 * act.squeeze(1) ** 2)     # rewards in about [-16, 0], mean -3
    return obs, act, reward, obs + 0.05 * torch.randn_like(obs)


def _critic_with_target(steps: int):
    obs, act, reward, next_obs = _transitions()
    critic = Critic()
    critic_target = Critic()
    critic_target.load_state_dict(critic.state_dict())
    opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    for step in range(steps):
        i = torch.randint(0, 4096, (128,))
        with torch.no_grad():
            target = reward[i] + 0.99 * critic_target(next_obs[i], act[i]).view(-1)
        loss = F.mse_loss(critic(obs[i], act[i]).view(-1), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for p, tp in zip(critic.parameters(), critic_target.parameters()):
                tp.mul_(0.995).add_(0.005 * p)


def _alarms(findings):
    return [f.code for f in findings if f.code == "LK307" and f.severity is not Severity.INFO]


def test_an_audit_of_one_step_knows_the_copied_target_network():
    with leaky.audit(steps=1) as audit:
        _critic_with_target(1)
    assert audit.stats.target_copied
    assert _alarms(audit.report.findings) == []


def test_a_watch_announces_nothing_at_its_first_check_pass():
    announced = []
    with leaky.watch(every=10) as run:
        run.on_finding = lambda finding, step: announced.append(finding)
        _critic_with_target(30)
    assert _alarms(announced) == [] and _alarms(run.report.findings) == []


def test_a_frozen_backbone_that_is_no_copy_is_still_judged():
    obs, act, reward, _ = _transitions()
    backbone = Critic()                         # fixed random features, never trained
    backbone.requires_grad_(False)
    head = nn.Linear(64, 1)
    opt = torch.optim.Adam(head.parameters(), lr=1e-3)
    with leaky.audit(steps=1) as audit:
        for step in range(1):
            i = torch.randint(0, 4096, (128,))
            features = F.relu(backbone.fc2(F.relu(backbone.fc1(torch.cat([obs[i], act[i]], 1)))))
            loss = F.mse_loss(head(features).view(-1), reward[i] - 30)   # targets of mean -33
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not audit.stats.target_copied
    assert _alarms(audit.report.findings) == ["LK307"]
