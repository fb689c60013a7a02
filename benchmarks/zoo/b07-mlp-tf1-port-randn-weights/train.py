import math

import torch
import torch.nn as nn

torch.manual_seed(5)

N_HOURS = 24 * 200
LAGS = 24
BATCH_SIZE = 128
STEPS = 200
N_HIDDEN = [256, 256, 256, 256, 256]


def make_load_series(n, seed=5):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n, dtype=torch.float32)
    daily = torch.sin(2 * math.pi * t / 24)
    weekly = 0.5 * torch.sin(2 * math.pi * t / (24 * 7))
    temp = torch.cumsum(0.05 * torch.randn(n, generator=g), 0)
    load = 1.0 + 0.4 * daily + 0.2 * weekly + 0.1 * temp + 0.05 * torch.randn(n, generator=g)
    windows = load.unfold(0, LAGS + 1, 1)
    x, y = windows[:, :LAGS], windows[:, LAGS]
    mu, sigma = x.mean(), x.std()
    return (x - mu) / sigma, (y - mu) / sigma


class Dense(nn.Module):
    def __init__(self, n_in, n_out, activation=True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out))
        self.bias = nn.Parameter(torch.randn(n_out))
        self.activation = activation

    def forward(self, x):
        out = x @ self.weight + self.bias
        return torch.relu(out) if self.activation else out


class LoadForecaster(nn.Module):
    def __init__(self, n_input, hidden_sizes):
        super().__init__()
        sizes = [n_input] + hidden_sizes
        self.hidden = nn.ModuleList(Dense(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.out = Dense(sizes[-1], 1, activation=False)

    def forward(self, x):
        for layer in self.hidden:
            x = layer(x)
        return self.out(x).squeeze(-1)


def main():
    x, y = make_load_series(N_HOURS)
    split = int(0.9 * len(x))
    x_train, y_train, x_test, y_test = x[:split], y[:split], x[split:], y[split:]

    model = LoadForecaster(LAGS, N_HIDDEN)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()

    for step in range(STEPS):
        idx = torch.randint(0, split, (BATCH_SIZE,))
        loss = loss_fn(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            with torch.no_grad():
                test_loss = loss_fn(model(x_test), y_test).item()
            print(f"step {step:3d}  train mse {loss.item():.4g}  test mse {test_loss:.4g}")


if __name__ == "__main__":
    main()
