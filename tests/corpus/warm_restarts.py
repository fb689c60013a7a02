"""SGD with warm restarts (SGDR): the learning rate jumps back up every 30 steps, and the
loss jumps with it before falling again. A periodic structure that is not divergence.

    python warm_restarts.py [--steps N]
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=240)
args = parser.parse_args()
torch.manual_seed(0)

x = torch.randn(2048, 8)
y = torch.sin(x[:, :1] * 2) + x[:, 1:2] * x[:, 2:3]
model = nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=30, eta_min=1e-4)
for step in range(args.steps):
    idx = torch.randint(0, len(x), (64,))
    loss = F.mse_loss(model(x[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if step % 30 == 0:
        print(f"step {step} lr {scheduler.get_last_lr()[0]:.4f} loss {loss.item():.4f}")
