"""Regress a landmark's standardised (x, y) offset from a 32-dimensional image embedding.

The head was copied from the hidden layers, ReLU included: the output cannot go below 0,
while about half of the standardised targets are negative. Even one batch, repeated,
cannot be fitted: the loss keeps the part that the clipped outputs cannot reach.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def make_embeddings(n=4000, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=g)
    w = torch.randn(32, 2, generator=g) / 32 ** 0.5
    offset = torch.tanh(x @ w * 2) + 0.05 * torch.randn(n, 2, generator=g)
    offset = (offset - offset.mean(0)) / offset.std(0)          # standardised targets
    return x, offset


class LandmarkHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU())
        self.out = nn.Sequential(nn.Linear(128, 2), nn.ReLU())

    def forward(self, x):
        return self.out(self.hidden(x))


x, y = make_embeddings()
model = LandmarkHead()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
history = []
for step in range(300):
    idx = torch.randint(0, len(x), (64,), generator=g)
    loss = F.mse_loss(model(x[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    history.append(loss.item())
print(f"mse: first {history[0]:.3f}, last {history[-1]:.3f}")
