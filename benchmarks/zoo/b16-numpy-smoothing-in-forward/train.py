import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)

WINDOW = 48
HORIZON = 1
N_SENSORS = 3


def make_series(n_windows):
    t = np.arange(n_windows + WINDOW + HORIZON, dtype=np.float32)
    load = np.sin(2 * np.pi * t / 24) + 0.5 * np.sin(2 * np.pi * t / 168)
    temp = np.cos(2 * np.pi * t / 24 + 0.3)
    humid = 0.3 * np.sin(2 * np.pi * t / 12)
    signals = np.stack([load, temp, humid], axis=0) + 0.2 * np.random.randn(3, len(t)).astype(np.float32)
    xs = np.stack([signals[:, i:i + WINDOW] for i in range(n_windows)])
    ys = np.array([load[i + WINDOW + HORIZON - 1] for i in range(n_windows)], dtype=np.float32)
    return torch.from_numpy(xs.astype(np.float32)), torch.from_numpy(ys).unsqueeze(1)


def moving_average(a, k=5):
    kernel = np.ones(k, dtype=np.float32) / k
    return np.apply_along_axis(lambda row: np.convolve(row, kernel, mode="same"), -1, a)


class LoadForecaster(nn.Module):
    def __init__(self, channels=16, hidden=32):
        super().__init__()
        self.conv = nn.Conv1d(N_SENSORS, channels, kernel_size=5, padding=2)
        self.gru = nn.GRU(channels, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        feats = F.relu(self.conv(x))
        feats = torch.from_numpy(moving_average(feats.detach().numpy()))
        out, _ = self.gru(feats.transpose(1, 2))
        return self.head(out[:, -1])


def main():
    x, y = make_series(1500)
    x_train, y_train = x[:1200], y[:1200]
    x_val, y_val = x[1200:], y[1200:]

    model = LoadForecaster()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    history = []
    for step in range(120):
        idx = torch.randint(0, len(x_train), (32,))
        pred = model(x_train[idx])
        loss = F.mse_loss(pred, y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 20 == 0:
            print(f"step {step:3d}  mse {loss.item():.4f}")

    with torch.no_grad():
        print(f"val mse {F.mse_loss(model(x_val), y_val).item():.4f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
