import torch
import torch.nn as nn

torch.manual_seed(0)

COLUMNS = ["air_temp_K", "process_temp_K", "rotational_speed_rpm", "torque_Nm", "tool_wear_min", "vibration_mm_s"]


def read_machine_log(n=5000, seed=4):
    """Synthetic predictive-maintenance log; label = failure within the next shift."""
    g = torch.Generator().manual_seed(seed)
    air = 300 + 2 * torch.randn(n, generator=g)
    process = air + 10 + 1 * torch.randn(n, generator=g)
    rpm = 1500 + 180 * torch.randn(n, generator=g)
    torque = 40 + 10 * torch.randn(n, generator=g)
    wear = 200 * torch.rand(n, generator=g)
    vib = 2.5 + 0.8 * torch.randn(n, generator=g)
    x = torch.stack([air, process, rpm, torque, wear, vib], dim=1)
    power = torque * rpm * 2 * 3.1416 / 60
    risk = 0.00045 * (power - 6300) + 0.012 * (wear - 100) + 0.8 * (vib - 2.5) + 0.5 * (process - air - 10)
    y = (risk + 0.5 * torch.randn(n, generator=g) > 0.6).float()
    return x, y


class FailurePredictor(nn.Module):
    def __init__(self, n_in, hidden=32):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        return self.out(h).squeeze(-1)


def main():
    x, y = read_machine_log()
    x_train, y_train, x_test, y_test = x[:4000], y[:4000], x[4000:], y[4000:]
    print(f"failure rate {y.mean():.3f}")
    model = FailurePredictor(len(COLUMNS))
    criterion = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    history = []

    for epoch in range(5):
        perm = torch.randperm(len(x_train))
        for i in range(0, len(x_train), 100):
            idx = perm[i:i + 100]
            loss = criterion(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(loss.item())
        with torch.no_grad():
            acc = ((model(x_test) > 0).float() == y_test).float().mean().item()
        print(f"epoch {epoch}  loss {history[-1]:.4f}  test accuracy {acc:.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
