"""PPO with several epochs over shuffled minibatches of each rollout, in the idiom of
CleanRL's ppo.py: one agent with a shared trunk, advantages by GAE, returns normalised by
a running scale, a clipped policy loss, a clipped value loss and an entropy bonus, the
gradient norm clipped. Each optimizer step sees a different minibatch, and each rollout
brings new data, so the per-step loss is no single objective on one batch.

The environment is balance_env.Balance, a small task written here (no gym).

    python ppo_minibatch_epochs.py [--iterations N] [--update-epochs E] [--minibatches M]
"""
import argparse

import numpy as np
import torch
from torch import nn
from torch.distributions.categorical import Categorical

from balance_env import Balance

parser = argparse.ArgumentParser()
parser.add_argument("--iterations", type=int, default=6)
parser.add_argument("--num-steps", type=int, default=256)
parser.add_argument("--update-epochs", type=int, default=10)
parser.add_argument("--minibatches", type=int, default=8)
parser.add_argument("--learning-rate", type=float, default=3e-4)
args = parser.parse_args()
np.random.seed(2)
torch.manual_seed(2)


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(layer_init(nn.Linear(4, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh())
        self.actor = layer_init(nn.Linear(64, 2), std=0.01)
        self.critic = layer_init(nn.Linear(64, 1), std=1.0)

    def forward(self, x, action=None):
        hidden = self.trunk(x)
        probs = Categorical(logits=self.actor(hidden))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden).flatten()


env = Balance()
agent = Agent()
optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
obs = torch.zeros((args.num_steps, 4))
actions, logprobs, rewards, dones, values = (torch.zeros(args.num_steps) for _ in range(5))
next_obs, next_done, return_scale = torch.tensor(env.reset()), 0.0, 1.0
batch_size = args.num_steps
minibatch_size = batch_size // args.minibatches
for iteration in range(args.iterations):
    frac = 1.0 - iteration / args.iterations
    optimizer.param_groups[0]["lr"] = frac * args.learning_rate   # linear annealing
    for step in range(args.num_steps):
        obs[step], dones[step] = next_obs, next_done
        with torch.no_grad():
            action, logprob, _, value = agent(next_obs[None])
        values[step], actions[step], logprobs[step] = value, action, logprob
        state, reward, done = env.step(int(action))
        rewards[step] = reward / 10.0
        next_obs, next_done = torch.tensor(env.reset() if done else state), float(done)
    with torch.no_grad():
        next_value = agent(next_obs[None])[3]
        advantages, lastgaelam = torch.zeros_like(rewards), 0
        for t in reversed(range(args.num_steps)):
            nextnonterminal = 1.0 - (next_done if t == args.num_steps - 1 else dones[t + 1])
            nextvalues = next_value if t == args.num_steps - 1 else values[t + 1]
            delta = rewards[t] + 0.99 * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + 0.99 * 0.95 * nextnonterminal * lastgaelam
        returns = advantages + values
    for epoch in range(args.update_epochs):
        b_inds = np.random.permutation(batch_size)
        for start in range(0, batch_size, minibatch_size):
            mb = torch.as_tensor(b_inds[start:start + minibatch_size])
            _, newlogprob, entropy, newvalue = agent(obs[mb], actions.long()[mb])
            logratio = newlogprob - logprobs[mb]
            ratio = logratio.exp()
            mb_adv = advantages[mb]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 0.8, 1.2)).mean()
            v_clipped = values[mb] + torch.clamp(newvalue - values[mb], -0.2, 0.2)
            v_loss = 0.5 * torch.max((newvalue - returns[mb]) ** 2, (v_clipped - returns[mb]) ** 2).mean()
            loss = pg_loss - 0.01 * entropy.mean() + v_loss * 0.5
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
    print(f"iteration {iteration}: value loss {v_loss.item():.4f}, episode return so far {rewards.sum().item():.1f}")
