import torch
import torch.nn as nn

torch.manual_seed(0)


def make_building_energy(n=4096, seed=5):
    """Standardised building descriptors -> heating and cooling load (kWh/m2, scaled)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    w1 = torch.randn(8, 16, generator=g) / 8 ** 0.5
    w2 = torch.randn(16, 2, generator=g) / 4
    y = torch.tanh(x @ w1) @ w2 + 0.05 * torch.randn(n, 2, generator=g)
    return x, y


class EnergyRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 128), nn.ReLU(),
                                  nn.Linear(128, 128), nn.ReLU())
        self.out = nn.Linear(128, 2)

    def forward(self, x):
        return self.out(self.body(x))


def main():
    x, y = make_building_energy()
    model = EnergyRegressor()
    criterion = nn.MSELoss(reduction="sum")
    optimizer = torch.optim.SGD(model.parameters(), lr=3e-3, momentum=0.9)
    batch_size = 256
    history = []

    for epoch in range(6):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), batch_size):
            idx = perm[i:i + batch_size]
            loss = criterion(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(loss.item())
        print(f"epoch {epoch}  loss {history[-1]:.4g}")
    return model, history


if __name__ == "__main__":
    model, history = main()
