import torch
import torch.nn as nn

torch.manual_seed(0)


def load_listings(n=1000, seed=11):
    """Synthetic real-estate listings: living area (sq ft), rooms, year built, distance (km)."""
    g = torch.Generator().manual_seed(seed)
    area = 800 + 1600 * torch.rand(n, generator=g)
    rooms = torch.randint(1, 7, (n,), generator=g).float()
    year = torch.randint(1950, 2021, (n,), generator=g).float()
    distance = 30 * torch.rand(n, generator=g)
    x = torch.stack([area, rooms, year, distance], dim=1)
    price = 0.12 * area + 8 * rooms + 0.4 * (year - 1950) - 2.5 * distance + 40
    price = price + 10 * torch.randn(n, generator=g)
    return x, price.unsqueeze(1)


class LinearRegression(nn.Module):
    def __init__(self, n_features):
        super().__init__()
        self.linear = nn.Linear(n_features, 1)

    def forward(self, x):
        return self.linear(x)


def main():
    x, y = load_listings()
    model = LinearRegression(x.shape[1])
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    history = []

    for epoch in range(60):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 200):
            idx = perm[i:i + 200]
            loss = criterion(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(loss.item())
        if epoch % 10 == 0:
            print(f"epoch {epoch:2d}  mse {history[-1]:.4g}")
    print("weights", model.linear.weight.data.tolist(), "bias", model.linear.bias.item())
    return model, history


if __name__ == "__main__":
    model, history = main()
