import math
import random
from collections import deque

import torch
import torch.nn as nn

random.seed(0)
torch.manual_seed(0)

GAMMA = 0.95
BATCH_SIZE = 64
BUFFER_SIZE = 10000
WARMUP = 500
TRAIN_STEPS = 300
TARGET_SYNC = 100
EPS_START, EPS_END, EPS_DECAY = 1.0, 0.1, 2000


class BatteryMarket:
    """Charge (0), idle (1) or discharge (2) a 1 MWh battery against an hourly price."""

    def __init__(self, seed=0):
        self.rng = random.Random(seed)
        self.capacity = 4

    def price(self, hour):
        return 50 + 25 * math.sin(2 * math.pi * (hour - 9) / 24) + self.rng.gauss(0, 8)

    def observe(self):
        h = self.hour % 24
        return torch.tensor([
            math.sin(2 * math.pi * h / 24), math.cos(2 * math.pi * h / 24),
            (self.current_price - 50) / 25, self.charge / self.capacity,
        ], dtype=torch.float32)

    def reset(self):
        self.hour = self.rng.randrange(24)
        self.charge = self.rng.randrange(self.capacity + 1)
        self.current_price = self.price(self.hour)
        return self.observe()

    def step(self, action):
        reward = 0.0
        if action == 0 and self.charge < self.capacity:
            self.charge += 1
            reward = -self.current_price / 10
        elif action == 2 and self.charge > 0:
            self.charge -= 1
            reward = 0.95 * self.current_price / 10
        self.hour += 1
        self.current_price = self.price(self.hour)
        done = self.hour % 24 == 0
        return self.observe(), reward, done


class QNetwork(nn.Module):
    def __init__(self, n_obs=4, n_actions=3, hidden=128):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(n_obs, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, n_actions),
        )

    def forward(self, obs):
        return self.layers(obs)


def main():
    env = BatteryMarket()
    policy_net = QNetwork()
    target_net = QNetwork()
    target_net.load_state_dict(policy_net.state_dict())
    optimizer = torch.optim.RMSprop(policy_net.parameters(), lr=2.5e-4)
    replay = deque(maxlen=BUFFER_SIZE)

    obs = env.reset()
    episode_return, returns = 0.0, []
    for t in range(WARMUP + TRAIN_STEPS):
        eps = EPS_END + (EPS_START - EPS_END) * math.exp(-t / EPS_DECAY)
        if random.random() < eps:
            action = random.randrange(3)
        else:
            with torch.no_grad():
                action = policy_net(obs).argmax().item()
        next_obs, reward, done = env.step(action)
        replay.append((obs, action, reward, next_obs, done))
        episode_return += reward
        obs = next_obs
        if done:
            returns.append(episode_return)
            episode_return = 0.0
            obs = env.reset()

        if t < WARMUP:
            continue

        batch = random.sample(replay, BATCH_SIZE)
        states = torch.stack([b[0] for b in batch])
        actions = torch.tensor([b[1] for b in batch])
        rewards = torch.tensor([b[2] for b in batch], dtype=torch.float32)
        next_states = torch.stack([b[3] for b in batch])
        dones = torch.tensor([b[4] for b in batch], dtype=torch.float32)

        q = policy_net(states).gather(1, actions[:, None]).squeeze(1)
        with torch.no_grad():
            q_next = target_net(next_states).max(1).values
            target = rewards + GAMMA * (1 - dones) * q_next
        td_error = target - q
        loss = torch.clamp(td_error, -1.0, 1.0).pow(2).mean()

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if t % TARGET_SYNC == 0:
            target_net.load_state_dict(policy_net.state_dict())
        if t % 50 == 0:
            recent = sum(returns[-5:]) / max(len(returns[-5:]), 1)
            print(f"t {t:4d}  loss {loss.item():.4f}  |td| {td_error.abs().mean().item():.2f}  eps {eps:.2f}  return {recent:.1f}")


if __name__ == "__main__":
    main()
