import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)


def make_credit_data(n=3000, n_features=12, seed=7):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, n_features, generator=g)
    w = torch.randn(n_features, generator=g)
    logits = x @ w * 0.8 + 0.5 * x[:, 0] * x[:, 1] - 0.3
    y = (torch.rand(n, generator=g) < torch.sigmoid(logits)).float()
    return x, y


class DefaultRiskModel(nn.Module):
    def __init__(self, n_features=12):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_features, 64), nn.ReLU(),
            nn.Linear(64, 32), nn.ReLU(),
            nn.Linear(32, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


def main():
    x, y = make_credit_data()
    loader = DataLoader(TensorDataset(x[:2500], y[:2500]), batch_size=50, shuffle=True)
    x_val, y_val = x[2500:], y[2500:]

    model = DefaultRiskModel()
    criterion = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    history = []

    for epoch in range(4):
        model.train()
        optimizer.zero_grad()
        for xb, yb in loader:
            loss = criterion(model(xb), yb)
            loss.backward()
            optimizer.step()
            history.append(loss.item())
        model.eval()
        with torch.no_grad():
            val_logits = model(x_val)
            val_loss = criterion(val_logits, y_val).item()
            val_acc = ((val_logits > 0).float() == y_val).float().mean().item()
        print(f"epoch {epoch}  train loss {sum(history[-len(loader):]) / len(loader):.4f}  "
              f"val loss {val_loss:.4f}  val acc {val_acc:.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
