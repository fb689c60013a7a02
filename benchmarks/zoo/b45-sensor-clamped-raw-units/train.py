"""Predict a motor's fault class (4 kinds) from 12 vibration features read in raw units.

The pipeline clamps every feature to [0, 1], as if it had been scaled to that range, but
the readings come in raw units (hundreds): after the clamp every sample is all ones, and
the classifier sees the same input for every sample.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def make_readings(n=3000, seed=0):
    g = torch.Generator().manual_seed(seed)
    fault = torch.randint(0, 4, (n,), generator=g)
    centers = 300 + 60 * torch.randn(4, 12, generator=g)
    readings = centers[fault] + 25 * torch.randn(n, 12, generator=g)
    return readings, fault


def preprocess(readings):
    return readings.clamp(0.0, 1.0)


class FaultNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x):
        return self.net(x)


readings, fault = make_readings()
model = FaultNet()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
history = []
for step in range(300):
    idx = torch.randint(0, len(readings), (64,), generator=g)
    loss = F.cross_entropy(model(preprocess(readings[idx])), fault[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    history.append(loss.item())
print(f"cross-entropy: first {history[0]:.3f}, last {history[-1]:.3f} (prior: ln 4 = 1.386)")
