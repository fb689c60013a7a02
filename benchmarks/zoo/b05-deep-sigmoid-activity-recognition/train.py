import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3)

ACTIVITIES = ["walking", "running", "sitting", "standing", "stairs_up", "stairs_down"]
WINDOW = 32
CHANNELS = 3
N_WINDOWS = 3000
BATCH_SIZE = 64
EPOCHS = 3


def simulate_accelerometer(n, seed=3):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, len(ACTIVITIES), (n,), generator=g)
    t = torch.arange(WINDOW, dtype=torch.float32) / 16.0
    freq = torch.tensor([1.8, 2.8, 0.0, 0.0, 1.4, 1.6])[labels]
    amp = torch.tensor([1.0, 2.2, 0.05, 0.1, 1.3, 1.1])[labels]
    tilt = torch.tensor([0.0, 0.1, 0.9, 0.0, 0.3, -0.3])[labels]
    phase = 2 * math.pi * torch.rand(n, 1, generator=g)
    base = amp[:, None] * torch.sin(2 * math.pi * freq[:, None] * t + phase)
    x = torch.stack([base, 0.5 * base + tilt[:, None], tilt[:, None].expand(-1, WINDOW)], dim=1)
    x = x + 0.3 * torch.randn(n, CHANNELS, WINDOW, generator=g)
    return x.reshape(n, -1), labels


class ActivityNet(nn.Module):
    def __init__(self, n_in, n_classes, hidden=128, depth=10):
        super().__init__()
        layers = []
        width = n_in
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.Sigmoid()]
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    x, y = simulate_accelerometer(N_WINDOWS)
    mean, std = x[:2500].mean(0), x[:2500].std(0)
    x = (x - mean) / std
    x_train, y_train, x_test, y_test = x[:2500], y[:2500], x[2500:], y[2500:]

    model = ActivityNet(x.shape[1], len(ACTIVITIES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    step = 0
    for epoch in range(EPOCHS):
        perm = torch.randperm(len(x_train))
        for i in range(0, len(x_train), BATCH_SIZE):
            idx = perm[i:i + BATCH_SIZE]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 10 == 0:
                print(f"epoch {epoch} step {step:3d}  loss {loss.item():.4f}")
            step += 1
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        print(f"epoch {epoch}  test acc {acc:.3f}")


if __name__ == "__main__":
    main()
