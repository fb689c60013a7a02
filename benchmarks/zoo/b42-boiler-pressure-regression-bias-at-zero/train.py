"""Predict a boiler's steam pressure (kPa, ~310) from eight standardised sensor channels.

The inputs are standardised, the targets are not: the output layer starts with its bias
at 0, about 310 kPa below every target, and Adam moves that bias by ~lr per step.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def make_readings(n=2400, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    pressure = 310.0 + 18.0 * torch.tanh(x[:, 0] + 0.5 * x[:, 1] - 0.3 * x[:, 2]) + 2.0 * torch.randn(n, generator=g)
    return x, pressure[:, None]


class PressureNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 1)

    def forward(self, x):
        return self.head(self.body(x))


x, y = make_readings()
x_train, y_train, x_test, y_test = x[:2000], y[:2000], x[2000:], y[2000:]
model = PressureNet()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
history = []
for step in range(400):
    idx = torch.randint(0, 2000, (64,))
    loss = F.mse_loss(model(x_train[idx]), y_train[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    history.append(loss.item())
with torch.no_grad():
    test_mse = F.mse_loss(model(x_test), y_test).item()
print(f"first loss {history[0]:.0f}, last {history[-1]:.1f}, test MSE {test_mse:.1f}")
