import torch
import torch.nn as nn

torch.manual_seed(0)

FEATURES = ["sqft", "bedrooms", "bathrooms", "age", "lot_size", "distance_to_city", "garage", "school_rating"]


def make_housing(n=2000, seed=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, len(FEATURES), generator=g)
    coef = torch.tensor([45.0, 8.0, 12.0, -10.0, 6.0, -20.0, 5.0, 15.0])
    price = 260.0 + x @ coef + 5.0 * torch.randn(n, generator=g)  # thousands of dollars
    return x, price.unsqueeze(1)


def build_model(n_in):
    return nn.Sequential(
        nn.Linear(n_in, 64), nn.ReLU(),
        nn.Linear(64, 32), nn.ReLU(),
        nn.Linear(32, 1), nn.Sigmoid(),
    )


def main():
    x, y = make_housing()
    x_train, y_train, x_test, y_test = x[:1600], y[:1600], x[1600:], y[1600:]
    model = build_model(x.shape[1])
    criterion = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    history = []

    for epoch in range(5):
        perm = torch.randperm(len(x_train))
        for i in range(0, len(x_train), 64):
            idx = perm[i:i + 64]
            loss = criterion(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(loss.item())
        with torch.no_grad():
            rmse = criterion(model(x_test), y_test).sqrt().item()
        print(f"epoch {epoch}  train mse {history[-1]:.1f}  test rmse {rmse:.2f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
