import math

import torch
import torch.nn as nn

torch.manual_seed(0)

WINDOW = 20
BATCH = 32


def synthetic_series(length=1461, seed=42):
    """Four years of daily values: trend + yearly seasonality + noise."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(length, dtype=torch.float32)
    trend = 0.05 * t / 10
    season = torch.where((t % 365) / 365 < 0.4,
                         torch.cos((t % 365) / 365 * 2 * math.pi),
                         1 / torch.exp(3 * (t % 365) / 365))
    return 10 + trend + 4 * season + 0.5 * torch.randn(length, generator=g)


def windowed(series):
    xs = series.unfold(0, WINDOW + 1, 1)
    return xs[:, :WINDOW].unsqueeze(-1), xs[:, WINDOW:]


class SeriesForecaster(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, num_layers=2, batch_first=True)
        self.dense = nn.Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.dense(out[:, -1])


def main():
    series = synthetic_series()
    x_train, y_train = windowed(series[:1000])

    model = SeriesForecaster()
    loss_fn = nn.HuberLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-8, momentum=0.9)
    lr_schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 10 ** (epoch / 20))
    history = []

    for epoch in range(8):
        perm = torch.randperm(len(x_train))
        epoch_loss = 0.0
        for i in range(0, 30 * BATCH, BATCH):
            idx = perm[i:i + BATCH]
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
            history.append(loss.item())
        lr_schedule.step()
        print(f"epoch {epoch}  loss {epoch_loss / 30:.4f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
