"""An actor-critic trained one episode at a time, in the idiom of pytorch/examples'
reinforcement_learning/actor_critic.py: a shared body with an action head (softmax over the
actions) and a value head, actions sampled from Categorical(probs) at every environment step,
and at the episode's end one loss, the policy-gradient terms with the critic's advantage plus
the critic's smooth-L1 loss on the normalised returns.

The environment is balance_env.Balance, a small task written here (no gym).

    python policy_collapse.py [--episodes N] [--lr LR]
"""
import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical

from balance_env import Balance

parser = argparse.ArgumentParser()
parser.add_argument("--episodes", type=int, default=30)
parser.add_argument("--gamma", type=float, default=0.99)
parser.add_argument("--lr", type=float, default=3e-3)
args = parser.parse_args()
np.random.seed(2)
torch.manual_seed(2)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.action_head = nn.Linear(128, 2)
        self.value_head = nn.Linear(128, 1)

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_prob = F.softmax(self.action_head(x), dim=-1)
        return action_prob, self.value_head(x)


env = Balance()
model = Policy()
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
eps = np.finfo(np.float32).eps.item()
for episode in range(args.episodes):
    state, log_probs, values, rewards = env.reset(), [], [], []
    for t in range(100):
        probs, value = model(torch.from_numpy(state).float())
        m = Categorical(probs)
        action = m.sample()
        log_probs.append(m.log_prob(action))
        values.append(value)
        state, reward, done = env.step(action.item())
        rewards.append(reward)
        if done:
            break
    R, returns = 0.0, []
    for r in rewards[::-1]:
        R = r + args.gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    policy_losses, value_losses = [], []
    for log_prob, value, R in zip(log_probs, values, returns):
        advantage = R - value.item()
        policy_losses.append(-log_prob * advantage)
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
    optimizer.zero_grad()
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
    loss.backward()
    optimizer.step()
    print(f"episode {episode} length {len(rewards)} max prob {probs.max().item():.3f}")
