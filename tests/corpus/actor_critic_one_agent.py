"""An actor and a critic held by one agent, in the idiom of CleanRL's ppo.py: two nn.Sequential
models called through the agent's methods (never through its forward), one optimizer over
both, a clipped policy loss, a value loss and an entropy bonus.

The environment is balance_env.Balance, a small task written here (no gym).

    python actor_critic_one_agent.py [--iterations N]
"""
import argparse

import numpy as np
import torch
from torch import nn
from torch.distributions.categorical import Categorical

from balance_env import Balance

parser = argparse.ArgumentParser()
parser.add_argument("--iterations", type=int, default=12)
parser.add_argument("--num-steps", type=int, default=128)
args = parser.parse_args()
np.random.seed(1)
torch.manual_seed(1)


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(4, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                    layer_init(nn.Linear(64, 1), std=1.0))
        self.actor = nn.Sequential(layer_init(nn.Linear(4, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                   layer_init(nn.Linear(64, 2), std=0.01))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


env = Balance()
agent = Agent()
optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
obs = torch.zeros((args.num_steps, 4))
actions, logprobs, rewards, dones, values = (torch.zeros(args.num_steps) for _ in range(5))
next_obs, next_done = torch.tensor(env.reset()), 0.0
for iteration in range(args.iterations):
    for step in range(args.num_steps):
        obs[step], dones[step] = next_obs, next_done
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs[None])
        values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
        state, reward, done = env.step(int(action))
        rewards[step] = reward
        next_obs, next_done = torch.tensor(env.reset() if done else state), float(done)
    with torch.no_grad():   # returns by GAE, bootstrapped from the critic
        next_value = agent.get_value(next_obs[None]).reshape(1)
        advantages, lastgaelam = torch.zeros_like(rewards), 0
        for t in reversed(range(args.num_steps)):
            nextnonterminal = 1.0 - (next_done if t == args.num_steps - 1 else dones[t + 1])
            nextvalues = next_value if t == args.num_steps - 1 else values[t + 1]
            delta = rewards[t] + 0.99 * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + 0.99 * 0.95 * nextnonterminal * lastgaelam
        returns = advantages + values
    for epoch in range(4):
        for mb in torch.randperm(args.num_steps).split(32):
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs[mb], actions.long()[mb])
            ratio = (newlogprob - logprobs[mb]).exp()
            mb_adv = (advantages[mb] - advantages[mb].mean()) / (advantages[mb].std() + 1e-8)
            pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 0.8, 1.2)).mean()
            v_loss = 0.5 * ((newvalue.view(-1) - returns[mb]) ** 2).mean()
            loss = pg_loss - 0.01 * entropy.mean() + v_loss * 0.5
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
    print(f"iteration {iteration} value loss {v_loss.item():.3f}")
