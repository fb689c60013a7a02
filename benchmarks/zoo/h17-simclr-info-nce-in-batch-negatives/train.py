"""SimCLR-style contrastive pretraining of a small encoder on synthetic 2-D point clouds.

Each cloud is augmented twice (jitter, a small rotation, dropped points); the NT-Xent loss scores
every view against the other 2B - 1 views of the batch (in-batch negatives). The LOSS mixes
the batch by design; the encoder (BatchNorm in training mode, dropout) is per-sample.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
POINTS, SHAPES = 24, 6


def make_clouds(n=1024, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = torch.randint(0, SHAPES, (n,), generator=g)
    angle = torch.rand(n, POINTS, generator=g) * 2 * math.pi
    radius = 1.0 + 0.3 * torch.sin((shape[:, None] + 2) * angle)          # petals per shape
    return torch.stack([radius * angle.cos(), radius * angle.sin()], dim=-1), shape


def augment(clouds, g):
    """Jitter, a small rotation and about 10% of the points dropped to the origin."""
    theta = 0.3 * (torch.rand(len(clouds), generator=g) - 0.5)
    rot = torch.stack([torch.stack([theta.cos(), -theta.sin()], -1), torch.stack([theta.sin(), theta.cos()], -1)], -2)
    out = clouds @ rot + 0.05 * torch.randn(clouds.shape, generator=g)
    keep = (torch.rand(clouds.shape[:2], generator=g) > 0.1).float()[..., None]
    return out * keep


class Encoder(nn.Module):
    def __init__(self, dim=64, proj=32):
        super().__init__()
        self.point = nn.Sequential(nn.Linear(2, dim), nn.BatchNorm1d(POINTS), nn.ReLU(), nn.Linear(dim, dim))
        self.project = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Dropout(0.1), nn.Linear(dim, proj))

    def forward(self, clouds):
        feats = self.point(clouds).max(dim=1).values          # a permutation-invariant pooling
        return self.project(feats)


def nt_xent(z1, z2, temperature=0.2):
    z = F.normalize(torch.cat([z1, z2]), dim=-1)
    sim = z @ z.T / temperature
    sim.fill_diagonal_(float("-inf"))
    n = len(z1)
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(sim, target)


clouds, shapes = make_clouds()
model = Encoder()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
g = torch.Generator().manual_seed(1)
history = []
for step in range(300):
    idx = torch.randint(0, len(clouds), (64,), generator=g)
    batch = clouds[idx]
    loss = nt_xent(model(augment(batch, g)), model(augment(batch, g)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    history.append(loss.item())
print(f"NT-Xent: first {history[0]:.3f} (chance ln(2B-1) = {math.log(127):.3f}), last {history[-1]:.3f}")
