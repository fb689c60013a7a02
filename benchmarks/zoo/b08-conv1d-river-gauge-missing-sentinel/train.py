import math

import torch
import torch.nn as nn

torch.manual_seed(2)

N_STATIONS_DAYS = 6000
WINDOW = 48
BATCH_SIZE = 64
EPOCHS = 2
MISSING = -9999.0


def load_gauge_records(n, seed=2):
    g = torch.Generator().manual_seed(seed)
    rain = torch.relu(torch.randn(n, WINDOW, generator=g) - 0.8) * 5.0
    kernel = torch.exp(-torch.arange(WINDOW, dtype=torch.float32).flip(0) / 6.0)
    level = 1.5 + 0.02 * (rain * kernel).sum(1) + 0.05 * torch.randn(n, generator=g)
    upstream = torch.cumsum(rain, 1) / WINDOW + 0.1 * torch.randn(n, WINDOW, generator=g)
    features = torch.stack([rain, upstream], dim=1)
    outage = torch.rand(n, generator=g) < 0.005
    level[outage] = MISSING
    return features, level


class GaugeCNN(nn.Module):
    def __init__(self, in_channels=2):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(in_channels, 32, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.Conv1d(32, 32, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool1d(4),
        )
        self.regressor = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4, 1))

    def forward(self, x):
        return self.regressor(self.features(x)).squeeze(-1)


def main():
    x, y = load_gauge_records(N_STATIONS_DAYS)
    x = (x - x.mean(dim=(0, 2), keepdim=True)) / x.std(dim=(0, 2), keepdim=True)
    split = 5000
    x_train, y_train, x_val, y_val = x[:split], y[:split], x[split:], y[split:]

    model = GaugeCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()

    step = 0
    for epoch in range(EPOCHS):
        perm = torch.randperm(split)
        for i in range(0, split, BATCH_SIZE):
            idx = perm[i:i + BATCH_SIZE]
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 10 == 0:
                print(f"epoch {epoch} step {step:3d}  mse {loss.item():.4f}")
            step += 1
        with torch.no_grad():
            val_mae = (model(x_val) - y_val).abs().median().item()
        print(f"epoch {epoch}  val median abs error {val_mae:.4f} m")


if __name__ == "__main__":
    main()
