"""clamp(td, -1, 1).pow(2): every transition with |TD error| > 1 sends exactly zero gradient to Q."""
import math
import os
import random
import sys
from collections import deque

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)


def run(huber, train_steps=300):
    random.seed(0)
    torch.manual_seed(0)
    env = train.BatteryMarket()
    policy_net, target_net = train.QNetwork(), train.QNetwork()
    target_net.load_state_dict(policy_net.state_dict())
    opt = torch.optim.RMSprop(policy_net.parameters(), lr=2.5e-4)
    replay = deque(maxlen=train.BUFFER_SIZE)
    obs = env.reset()
    zero_share, td_abs = [], []
    for t in range(train.WARMUP + train_steps):
        eps = train.EPS_END + (train.EPS_START - train.EPS_END) * math.exp(-t / train.EPS_DECAY)
        if random.random() < eps:
            action = random.randrange(3)
        else:
            with torch.no_grad():
                action = policy_net(obs).argmax().item()
        next_obs, reward, done = env.step(action)
        replay.append((obs, action, reward, next_obs, done))
        obs = env.reset() if done else next_obs
        if t < train.WARMUP:
            continue
        batch = random.sample(replay, train.BATCH_SIZE)
        states = torch.stack([b[0] for b in batch])
        actions = torch.tensor([b[1] for b in batch])
        rewards = torch.tensor([b[2] for b in batch], dtype=torch.float32)
        next_states = torch.stack([b[3] for b in batch])
        dones = torch.tensor([b[4] for b in batch], dtype=torch.float32)
        q = policy_net(states).gather(1, actions[:, None]).squeeze(1)
        q.retain_grad()
        with torch.no_grad():
            target = rewards + train.GAMMA * (1 - dones) * target_net(next_states).max(1).values
        td_error = target - q
        if huber:
            loss = F.smooth_l1_loss(q, target)
        else:
            loss = torch.clamp(td_error, -1.0, 1.0).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        zero_share.append((q.grad == 0).float().mean().item())
        td_abs.append(td_error.abs().mean().item())
        if t % train.TARGET_SYNC == 0:
            target_net.load_state_dict(policy_net.state_dict())
    return sum(zero_share[:20]) / 20, sum(zero_share) / len(zero_share), sum(td_abs[:20]) / 20, sum(td_abs[-20:]) / 20


z20_b, z_b, td0_b, td1_b = run(False)
z20_f, z_f, td0_f, td1_f = run(True)
print(f"clamp(td,-1,1)^2: share of transitions with dL/dQ == 0: {z20_b:.1%} (first 20 updates), {z_b:.1%} (all 300); mean |TD| {td0_b:.2f} -> {td1_b:.2f}")
print(f"smooth_l1_loss:   share with dL/dQ == 0: {z20_f:.1%} / {z_f:.1%}; mean |TD| {td0_f:.2f} -> {td1_f:.2f}")
ok_symptom = z20_b >= 0.25
ok_fix = z_f < 0.01 and td1_f < td1_b
print(("PASS" if ok_symptom else "FAIL") + f": the clipped TD loss zeroes the gradient of {z20_b:.0%} of the sampled transitions")
print(("PASS" if ok_fix else "FAIL") + f": Huber loss passes a gradient for all of them ({z_f:.1%} zero) and the TD error falls further ({td1_b:.2f} vs {td1_f:.2f})")
sys.exit(0 if ok_symptom and ok_fix else 1)
