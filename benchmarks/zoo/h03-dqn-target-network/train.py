"""DQN on a 4x4 gridworld with a replay buffer and a target network.

The TD target is computed from a separate target network under torch.no_grad() and the
loss is the Huber loss (F.smooth_l1_loss), the form of the Nature DQN paper's clipped
error that keeps the gradient. The target network gets no gradient and is never in the
optimizer: it is synced from the online network every SYNC steps.
"""
import random

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
random.seed(0)

SIDE = 4
STATES, ACTIONS = SIDE * SIDE, 4
GOAL = STATES - 1
GAMMA = 0.9
ENV_STEPS, LEARNING_STARTS, BATCH, SYNC = 300, 50, 64, 20
MAX_EPISODE = 30
MOVES = [(-1, 0), (1, 0), (0, -1), (0, 1)]


def env_step(state, action):
    r, c = divmod(state, SIDE)
    dr, dc = MOVES[action]
    r, c = min(max(r + dr, 0), SIDE - 1), min(max(c + dc, 0), SIDE - 1)
    nxt = r * SIDE + c
    done = nxt == GOAL
    return nxt, (1.0 if done else 0.0), done


def encode(states):
    return F.one_hot(torch.as_tensor(states), STATES).float()


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(STATES, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                 nn.Linear(64, ACTIONS))

    def forward(self, s):
        return self.net(s)


def optimal_q():
    """Value iteration: the exact Q* of the gridworld, for checking."""
    q = torch.zeros(STATES, ACTIONS)
    for _ in range(200):
        new = torch.zeros_like(q)
        for s in range(STATES):
            if s == GOAL:
                continue
            for a in range(ACTIONS):
                nxt, rew, done = env_step(s, a)
                new[s, a] = rew + (0.0 if done else GAMMA * q[nxt].max())
        q = new
    return q


def main(env_steps=ENV_STEPS, verbose=True):
    online = QNet()
    target = QNet()
    target.load_state_dict(online.state_dict())
    target.eval()
    opt = torch.optim.Adam(online.parameters(), lr=1e-3)
    buffer = []
    state, t = 0, 0
    losses = []
    for step in range(env_steps):
        eps = max(0.1, 1.0 - step / 200)
        if random.random() < eps:
            action = random.randrange(ACTIONS)
        else:
            with torch.no_grad():
                action = int(online(encode([state])).argmax())
        nxt, reward, done = env_step(state, action)
        buffer.append((state, action, reward, nxt, float(done)))
        state, t = nxt, t + 1
        if done or t >= MAX_EPISODE:
            state, t = random.randrange(STATES - 1), 0

        if step < LEARNING_STARTS:
            continue
        batch = random.sample(buffer, min(BATCH, len(buffer)))
        s, a, r, s2, d = zip(*batch)
        s, s2 = encode(s), encode(s2)
        a = torch.tensor(a)
        r, d = torch.tensor(r), torch.tensor(d)
        q = online(s).gather(1, a[:, None]).squeeze(1)
        with torch.no_grad():                                   # the target is a constant
            q_next = target(s2).max(dim=1).values
            td_target = r + GAMMA * (1.0 - d) * q_next
        loss = F.smooth_l1_loss(q, td_target)                   # Huber loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % SYNC == 0:
            target.load_state_dict(online.state_dict())
        if verbose and step % 25 == 0:
            print(f"step {step:3d}  eps {eps:.2f}  loss {loss.item():.5f}")
    return losses, online


if __name__ == "__main__":
    main()
