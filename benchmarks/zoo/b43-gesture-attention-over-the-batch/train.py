"""Classify hand gestures from 16-step IMU windows (B, T, 6) with a small attention model.

The windows come batch-first from the loader, but nn.MultiheadAttention is built with its
default batch_first=False: it reads dim 0 as the sequence, so every window attends over
the other windows of its batch instead of over its own time steps.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
GESTURES, STEPS, CHANNELS = 5, 16, 6


def make_windows(n=2000, seed=0):
    g = torch.Generator().manual_seed(seed)
    label = torch.randint(0, GESTURES, (n,), generator=g)
    t = torch.linspace(0, 1, STEPS)
    freq = 1.0 + label.float()[:, None]                              # each gesture its own rhythm
    base = torch.sin(6.28 * freq * t[None])                           # (n, T)
    x = 0.4 * torch.randn(n, STEPS, CHANNELS, generator=g)
    x[:, :, 0] += base
    x[:, :, 1] += base.roll(3, dims=1)
    return x, label


class GestureNet(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.embed = nn.Linear(CHANNELS, dim)
        self.attn = nn.MultiheadAttention(dim, 4)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, GESTURES)

    def forward(self, x):
        h = self.embed(x)
        a, _ = self.attn(h, h, h)
        h = self.norm(h + a)
        return self.head(h.mean(dim=1))


x, y = make_windows()
x_train, y_train, x_test, y_test = x[:1600], y[:1600], x[1600:], y[1600:]
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train), batch_size=32, shuffle=True)
model = GestureNet()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
for epoch in range(3):
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
model.eval()
with torch.no_grad():
    batched = (model(x_test).argmax(1) == y_test).float().mean().item()
    single = sum((model(x_test[i:i + 1]).argmax(1) == y_test[i]).item() for i in range(len(x_test))) / len(x_test)
print(f"test accuracy: {batched:.3f} in one batch, {single:.3f} one window at a time")
