"""Robust regression on heavy-tailed targets: the targets are clipped (winsorised) under
torch.no_grad(), and a clamped metric is computed under no_grad too.

Every clamp here acts on a constant: the clipped target and the metric are never part of
the graph that reaches the parameters, so no gradient is cut by them. The model output
itself is never clamped during training.
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

FEATURES = 16
N, BATCH, STEPS = 4096, 64, 200
CLIP = 3.0                        # winsorise targets at +-3 (about 2.5 sigma of the clean signal)


def make_data(n):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(FEATURES, generator=g) / FEATURES ** 0.5
    x = torch.randn(n, FEATURES, generator=g)
    clean = torch.sin(x @ w * 1.5) + 0.5 * (x[:, 0] * x[:, 1]) + 0.3 * x[:, 2]
    noise = torch.distributions.StudentT(1.5).sample((n,))              # heavy tails
    return x, clean + 0.1 * noise, clean


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 128), nn.SiLU(), nn.Linear(128, 128), nn.SiLU(),
                                 nn.Linear(128, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def main(steps=STEPS, verbose=True):
    x, y, _ = make_data(N)
    model = Regressor()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, N, (BATCH,))
        with torch.no_grad():
            target = y[idx].clamp(-CLIP, CLIP)                 # target clipping: a constant
        pred = model(x[idx])
        loss = F.mse_loss(pred, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        with torch.no_grad():                                  # metric: share within 0.5
            within = ((pred - target).abs().clamp(max=1.0) < 0.5).float().mean()
        if verbose and (step + 1) % 25 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.4f}  within-0.5 {within.item():.2f}")
    return losses, model


if __name__ == "__main__":
    main()
