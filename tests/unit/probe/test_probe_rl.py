"""`leaky probe` on programs whose data the model makes, and on a slow learner: no verdict that
the run cannot support.

In reinforcement learning the "batch" is a rollout, and its targets (returns, advantages, the
policy's own samples, a TD target) are computed from the model's outputs. LK308 replays the
first step's data frozen, targets included, and judges it only against a floor it knows (a
clipped surrogate or an entropy bonus has none it knows); LK309 cannot take "no better than
zeros" as evidence when zeroing the inputs changed the targets too. A slow learner (a bigram
table at lr 5e-4) moves too little in K steps for any difference to show: not decided.
The supervised look-alikes with a real fault still fail, at their lines.

Real scripts, written to tmp_path and run through the command with a small K."""
from __future__ import annotations

from tests.unit.probe.test_probe_findings import K, line_of, probe, verdicts

# A point pushed left or right: reward 1 per step until it leaves [-1, 1].
ENV = """\
import copy
import random
import torch
from torch import nn
import torch.nn.functional as F
from torch.distributions import Categorical
torch.manual_seed(0)
random.seed(0)


def env_step(s, a):
    s = s + torch.tensor([s[1], 0.1 if a == 1 else -0.1]) * 0.5 + 0.02 * torch.randn(2)
    return s, 1.0, bool(s.abs().max() > 1)
"""

# CleanRL's ppo.py in small: a rollout under no_grad, returns bootstrapped from the critic,
# epochs over shuffled minibatches, a clipped surrogate, a clipped value loss, an entropy bonus.
PPO = ENV + """
class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(2, 32), nn.Tanh())
        self.actor = nn.Linear(32, 2)
        self.critic = nn.Linear(32, 1)

    def forward(self, x, action=None):
        h = self.trunk(x)
        probs = Categorical(logits=self.actor(h))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(h).flatten()


agent = Agent()
opt = torch.optim.Adam(agent.parameters(), lr=3e-4, eps=1e-5)
N = 64
obs, actions, logprobs, rewards, dones, values = torch.zeros(N, 2), *(torch.zeros(N) for _ in range(5))
s = torch.zeros(2)
for iteration in range(40):
    for t in range(N):
        obs[t] = s
        with torch.no_grad():
            a, lp, _, v = agent(s[None])
        actions[t], logprobs[t], values[t] = a, lp, v
        s, r, d = env_step(s, int(a))
        rewards[t], dones[t] = r, d
        if d:
            s = torch.zeros(2)
    with torch.no_grad():
        returns, R = torch.zeros(N), agent(s[None])[3]
        for t in reversed(range(N)):
            R = rewards[t] + 0.99 * R * (1 - dones[t])
            returns[t] = R
        advantages = returns - values
    for epoch in range(4):
        for mb in torch.randperm(N).split(16):
            _, newlp, entropy, newv = agent(obs[mb], actions.long()[mb])
            ratio = (newlp - logprobs[mb]).exp()
            adv = (advantages[mb] - advantages[mb].mean()) / (advantages[mb].std() + 1e-8)
            pg = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
            v_clipped = values[mb] + (newv - values[mb]).clamp(-0.2, 0.2)
            v_loss = 0.5 * torch.max((newv - returns[mb]) ** 2, (v_clipped - returns[mb]) ** 2).mean()
            loss = pg - 0.01 * entropy.mean() + 0.5 * v_loss
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            opt.step()
"""


def test_ppo_minibatch_epochs_are_not_failed(tmp_path):
    """The clipped surrogate and value loss stop by design at a floor leaky does not know (the
    trust region): the repeated first minibatch is not judged against 0. The `==` a
    distribution's argument check makes is no loss of the input, and "no better than zeros" is
    no evidence when the targets come from the model."""
    code, data, _ = probe(tmp_path, PPO)
    overfit, inputs = data["probes"]
    assert "fail" not in verdicts(data).values(), [p["reason"] for p in data["probes"]]
    assert overfit["verdict"] == "could not run" and "floor" in overfit["reason"]
    assert inputs["measured"]["lost_at"] is None and inputs["measured"]["input_reaches_output"] is True
    assert inputs["verdict"] == "pass" or inputs["measured"]["targets_from_model"] is not None
    assert code in (0, 2) and data["findings"] == []


# An advantage actor-critic: the rollout acted under no_grad, the returns bootstrapped from the
# critic under no_grad, the advantage through .detach(), one update per rollout.
ACTOR_CRITIC = ENV + """
actor = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2))
critic = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=1e-3)
s = torch.zeros(2)
for update in range(300):
    states, acts, rews, dones = [], [], [], []
    with torch.no_grad():
        for t in range(16):
            a = Categorical(logits=actor(s)).sample()
            states.append(s)
            acts.append(a)
            s, r, d = env_step(s, int(a))
            rews.append(r)
            dones.append(float(d))
            if d:
                s = torch.zeros(2)
        R, returns = critic(s).squeeze(), []
        for r, d in zip(reversed(rews), reversed(dones)):
            R = r + 0.99 * R * (1 - d)
            returns.insert(0, R)
        returns = torch.stack(returns)
    S, A = torch.stack(states), torch.stack(acts)
    dist, v = Categorical(logits=actor(S)), critic(S).squeeze(1)
    advantage = returns - v.detach()
    loss = -(dist.log_prob(A) * advantage).mean() + 0.5 * (returns - v).pow(2).mean() - 0.01 * dist.entropy().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_actor_critic_with_returns_under_no_grad_is_not_failed(tmp_path):
    """A policy-gradient loss has no floor leaky knows (it goes below 0 once one batch is
    memorised); the zeroed run changes the returns and the actions it is scored on."""
    code, data, script = probe(tmp_path, ACTOR_CRITIC)
    overfit, inputs = data["probes"]
    assert "fail" not in verdicts(data).values(), [p["reason"] for p in data["probes"]]
    assert overfit["verdict"] == "could not run" and "floor" in overfit["reason"]
    if inputs["verdict"] == "could not run":
        origin = inputs["measured"]["targets_from_model"]
        assert origin is not None and origin["file"] == str(script), inputs["measured"]
        assert "computed from" in inputs["reason"]
    assert code in (0, 2) and data["findings"] == []


# CleanRL's dqn.py in small: it acts through the Q-network with grad enabled, stores
# transitions in a replay buffer, and regresses onto a target network's TD target.
DQN = ENV + """
qnet = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2))
target = copy.deepcopy(qnet)
opt = torch.optim.Adam(qnet.parameters(), lr=1e-3)
size = 1000
obs, nxt = torch.zeros(size, 2), torch.zeros(size, 2)
act, rew, done = torch.zeros(size, dtype=torch.long), torch.zeros(size), torch.zeros(size)
s, filled = torch.zeros(2), 0
for step in range(1500):
    if random.random() < max(0.05, 1 - step / 500):
        a = random.randrange(2)
    else:
        a = int(qnet(s[None]).argmax())
    s2, r, d = env_step(s, a)
    i = filled % size
    obs[i], nxt[i], act[i], rew[i], done[i] = s, s2, a, r, float(d)
    filled += 1
    s = torch.zeros(2) if d else s2
    if step >= 100 and step % 4 == 0:
        idx = torch.randint(0, min(filled, size), (32,))
        with torch.no_grad():
            td_target = rew[idx] + 0.99 * target(nxt[idx]).max(1).values * (1 - done[idx])
        q = qnet(obs[idx]).gather(1, act[idx][:, None]).squeeze(1)
        loss = F.mse_loss(q, td_target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            target.load_state_dict(qnet.state_dict())
"""


def test_dqn_acting_with_grad_replays_its_first_batch(tmp_path):
    """The Q-network's acting calls (one state, grad enabled) do not feed the loss: they are not
    the batch, and the replay leaves them alone instead of feeding their states to the update
    (which crashed: `gather` of a (1, 2) output with the batch's (32, 1) actions)."""
    code, data, script = probe(tmp_path, DQN)
    overfit, inputs = data["probes"]
    assert overfit["verdict"] == "pass", overfit["reason"]
    assert overfit["measured"]["floor_what"].startswith("mse_loss")
    assert inputs["verdict"] != "fail", inputs["reason"]
    assert inputs["measured"]["targets_from_model"]["line"] == line_of(DQN, "td_target = ")
    assert code in (0, 2) and data["findings"] == []


# makemore's Bigram: a zero-initialised table of logits, AdamW at 5e-4 (it moves each logit by at
# most lr per step), words padded with -1 targets that cross_entropy ignores.
BIGRAM = """\
import torch
from torch import nn
import torch.nn.functional as F
torch.manual_seed(0)
V, T = 27, 8
chain = torch.softmax(torch.randn(V, V) * 2.0, dim=1)
X, Y = torch.zeros(2000, T, dtype=torch.long), torch.full((2000, T), -1, dtype=torch.long)
c, alive = torch.zeros(2000, dtype=torch.long), torch.ones(2000, dtype=torch.bool)
for j in range(T - 1):        # 2000 words from a Markov chain, 0 the start and end token
    c = torch.multinomial(chain[c], 1).squeeze(1)
    Y[:, j] = torch.where(alive, c, Y[:, j])
    alive = alive & (c != 0)
    X[:, j + 1] = torch.where(alive, c, X[:, j + 1])
Y[:, T - 1] = torch.where(alive, 0, Y[:, T - 1])


class Bigram(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros((n, n)))

    def forward(self, idx, targets):
        logits = self.logits[idx]
        return F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)


model = Bigram(V)
opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01, betas=(0.9, 0.99))
for step in range(300):
    rows = torch.randint(0, 2000, (32,))
    loss = model(X[rows], Y[rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_slow_bigram_is_not_decided_and_its_zero_table_loses_nothing(tmp_path):
    """Adam moves a logit by at most lr per step: in K = 100 steps at 5e-4, 0.05, and the loss by
    at most 2 x 0.05: the real and the zeroed runs cannot differ beyond the noise (1% of 3.3).
    The zero table makes every sample's logits equal at step 0, but it trains: no line loses
    the input."""
    code, data, _ = probe(tmp_path, BIGRAM.replace("LR", "5e-4"))
    overfit, inputs = data["probes"]
    assert inputs["verdict"] == "could not run", inputs["reason"]
    assert "more steps would lower it" in inputs["reason"] or "fell by only" in inputs["reason"]
    assert inputs["measured"]["lost_at"] is None and inputs["measured"]["input_reaches_output"] is True
    # one batch is not memorised in K steps either, but the loss falls steadily and nothing stops it
    assert overfit["verdict"] == "could not run" and "falling steadily" in overfit["reason"], overfit["reason"]
    # the loss the model computes in its forward is known: cross_entropy, floor 0
    assert overfit["measured"]["floor_known"] and overfit["measured"]["floor_what"].startswith("cross_entropy")
    assert code == 2 and data["findings"] == []
    # at a learning rate that learns in K steps, the real inputs do better; and the batch is fitted
    # down to the floor of a model that sees one token, the entropy of the next one given it
    _, fast, _ = probe(tmp_path, BIGRAM.replace("LR", "5e-2"), name="fast.py")
    overfit, inputs = fast["probes"]
    assert inputs["verdict"] == "pass", inputs["reason"]
    assert overfit["verdict"] == "could not run" and "one output to rows with different targets" in overfit["reason"]
    floor, distinct, rows = overfit["measured"]["tied"]
    assert 1.0 < floor < 2.0 and distinct < 28 < rows and overfit["measured"]["remaining_tied"] < 0.05
    assert overfit["measured"]["remaining"] > 0.4                           # against 0 it kept over 40%


def test_a_bigram_whose_input_is_overwritten_still_fails_at_its_line(tmp_path):
    broken = BIGRAM.replace("LR", "5e-2").replace("        logits = self.logits[idx]",
                                                  "        idx = idx * 0\n        logits = self.logits[idx]")
    code, data, script = probe(tmp_path, broken)
    (finding,) = [f for f in data["findings"] if f["code"] == "LK309"]
    assert finding["source"] == {"file": str(script), "line": line_of(broken, "idx = idx * 0")}
    assert code == 1


# A supervised regression whose output layer is fed detached features: only the head's bias
# learns, so one batch cannot be memorised, and the input does not help.
CUT_REGRESSION = """\
import torch
from torch import nn
import torch.nn.functional as F
torch.manual_seed(0)
X = torch.randn(2048, 8)
t = X[:, 0] - 0.5 * X[:, 1]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.body(x).detach() * 0).squeeze(1)


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(300):
    rows = torch.randint(0, 2048, (64,))
    loss = F.mse_loss(model(X[rows]), t[rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_supervised_look_alike_with_a_cut_still_fails_both(tmp_path):
    code, data, script = probe(tmp_path, CUT_REGRESSION)
    assert verdicts(data) == {"LK308": "fail", "LK309": "fail"}, [p["reason"] for p in data["probes"]]
    assert data["probes"][1]["measured"]["targets_from_model"] is None
    assert code == 1


def test_the_table_shows_a_zeroed_run_that_overflowed():
    """A fully masked attention row gives the zeroed run an infinite loss: the JSON writes it as
    "inf", and the table reads it back (it raised TypeError in `num`, after every run was done)."""
    from rich.console import Console

    from leaky.report.probe import probe_table

    measured = {"real_loss": 0.00163, "zeroed_loss": "inf", "margin": 0.000744, "held_out": False}
    data = {"config": {"steps": 100}, "probes": [{"code": "LK309", "name": "input-ignored", "verdict": "pass",
                                                  "reason": "the real inputs do better", "seconds": 1.0,
                                                  "measured": measured}]}
    console = Console(width=120, record=True)
    console.print(probe_table(data))
    assert "zeroed inf" in console.export_text()
