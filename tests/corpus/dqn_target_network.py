"""A DQN with a target network synced every N optimizer steps, in the idiom of CleanRL's dqn.py:
epsilon-greedy acting, a replay buffer, a TD target from the target network under no_grad.

The environment is balance_env.Balance, a small task written here (no gym).

    python dqn_target_network.py [--total-timesteps N] [--target-network-frequency F]
"""
import argparse
import random

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from balance_env import Balance

parser = argparse.ArgumentParser()
parser.add_argument("--total-timesteps", type=int, default=7000)
parser.add_argument("--learning-starts", type=int, default=500)
parser.add_argument("--train-frequency", type=int, default=10)
parser.add_argument("--target-network-frequency", type=int, default=200)
parser.add_argument("--learning-rate", type=float, default=2.5e-4)
args = parser.parse_args()
random.seed(1)
np.random.seed(1)
torch.manual_seed(1)


class QNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.network = nn.Sequential(nn.Linear(4, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 2))

    def forward(self, x):
        return self.network(x)


env = Balance()
q_network = QNetwork()
optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)
target_network = QNetwork()
target_network.load_state_dict(q_network.state_dict())

size = 10000
obs_buf, next_buf = np.zeros((size, 4), np.float32), np.zeros((size, 4), np.float32)
act_buf, rew_buf, done_buf = np.zeros(size, np.int64), np.zeros(size, np.float32), np.zeros(size, np.float32)
filled = 0
obs = env.reset()
for global_step in range(args.total_timesteps):
    epsilon = max(0.05, 1 - global_step / (0.5 * args.total_timesteps))
    if random.random() < epsilon:
        action = random.randint(0, 1)
    else:
        q_values = q_network(torch.Tensor(obs)[None])
        action = int(torch.argmax(q_values).item())
    next_obs, reward, done = env.step(action)
    i = filled % size
    obs_buf[i], next_buf[i], act_buf[i], rew_buf[i], done_buf[i] = obs, next_obs, action, reward, done
    filled += 1
    obs = env.reset() if done else next_obs
    if global_step > args.learning_starts and global_step % args.train_frequency == 0:
        idx = np.random.randint(0, min(filled, size), 128)
        with torch.no_grad():
            target_max, _ = target_network(torch.from_numpy(next_buf[idx])).max(dim=1)
            td_target = torch.from_numpy(rew_buf[idx]) + 0.99 * target_max * (1 - torch.from_numpy(done_buf[idx]))
        old_val = q_network(torch.from_numpy(obs_buf[idx])).gather(1, torch.from_numpy(act_buf[idx])[:, None]).squeeze()
        loss = F.mse_loss(td_target, old_val)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if global_step % args.target_network_frequency == 0:
            for target_param, q_param in zip(target_network.parameters(), q_network.parameters()):
                target_param.data.copy_(q_param.data)
