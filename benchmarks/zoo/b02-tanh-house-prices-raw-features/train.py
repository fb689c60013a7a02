import torch
import torch.nn as nn

torch.manual_seed(0)

N_HOUSES = 3000
BATCH_SIZE = 64
EPOCHS = 4


def load_listings(n):
    g = torch.Generator().manual_seed(0)
    sqft = 600 + 3400 * torch.rand(n, generator=g)
    lot_size = 2000 + 18000 * torch.rand(n, generator=g)
    year_built = torch.randint(1900, 2021, (n,), generator=g).float()
    bedrooms = torch.randint(1, 7, (n,), generator=g).float()
    bathrooms = torch.randint(1, 5, (n,), generator=g).float()
    dist_center_km = 30 * torch.rand(n, generator=g)
    features = torch.stack(
        [sqft, lot_size, year_built, bedrooms, bathrooms, dist_center_km], dim=1
    )
    price = (
        150 * sqft
        + 4 * lot_size
        + 800 * (year_built - 1900)
        + 10000 * bathrooms
        - 3000 * dist_center_km
        + 20000 * torch.randn(n, generator=g)
    )
    return features, price / 1e5


class PriceRegressor(nn.Module):
    def __init__(self, n_in, hidden=64):
        super().__init__()
        self.hidden1 = nn.Linear(n_in, hidden)
        self.hidden2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        h = torch.tanh(self.hidden1(x))
        h = torch.tanh(self.hidden2(h))
        return self.out(h).squeeze(-1)


def main():
    x, y = load_listings(N_HOUSES)
    n_train = 2400
    x_train, y_train = x[:n_train], y[:n_train]
    x_test, y_test = x[n_train:], y[n_train:]

    model = PriceRegressor(x.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()

    step = 0
    for epoch in range(EPOCHS):
        perm = torch.randperm(n_train)
        for i in range(0, n_train, BATCH_SIZE):
            idx = perm[i:i + BATCH_SIZE]
            pred = model(x_train[idx])
            loss = loss_fn(pred, y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 10 == 0:
                print(f"step {step:4d}  train mse {loss.item():.4f}")
            step += 1
        with torch.no_grad():
            test_mse = loss_fn(model(x_test), y_test).item()
        print(f"epoch {epoch}  test mse {test_mse:.4f}")


if __name__ == "__main__":
    main()
