"""Flag rare defects (8% of parts) from 20 inspection features: a classifier whose output
bias starts at the prior's log-odds, trained with label smoothing.

Look-alike for the probes: its loss starts low (the bias already knows the prior), its
floor is not 0 (smoothed targets), and the rare class is learned slowly.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def make_parts(n=6000, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 20, generator=g)
    score = x[:, :3].sum(1) - 0.5 * x[:, 3] * x[:, 4]
    defect = (score > torch.quantile(score, 0.92)).long()
    return x, defect


x, y = make_parts()
prior = y.float().mean().item()
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
with torch.no_grad():
    model[-1].bias.copy_(torch.tensor([math.log(1 - prior), math.log(prior)]))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
g = torch.Generator().manual_seed(1)
history = []
for step in range(300):
    idx = torch.randint(0, len(x), (128,), generator=g)
    loss = criterion(model(x[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    history.append(loss.item())
print(f"loss: first {history[0]:.3f}, last {history[-1]:.3f}")
