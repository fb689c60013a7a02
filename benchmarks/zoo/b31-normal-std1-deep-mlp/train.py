import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

N_FEATURES = 20
N_CLASSES = 5


def make_activity_data(n=4000, seed=9):
    """Standardised accelerometer summary features -> one of five activities."""
    g = torch.Generator().manual_seed(seed)
    centers = 1.5 * torch.randn(N_CLASSES, N_FEATURES, generator=g)
    labels = torch.randint(0, N_CLASSES, (n,), generator=g)
    x = centers[labels] + torch.randn(n, N_FEATURES, generator=g)
    x = (x - x.mean(0)) / x.std(0)
    return x, labels


class ActivityNet(nn.Module):
    def __init__(self, width=64, depth=8):
        super().__init__()
        dims = [N_FEATURES] + [width] * depth
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = nn.Linear(width, N_CLASSES)
        self.reset_parameters()

    def reset_parameters(self):
        for layer in list(self.hidden) + [self.out]:
            nn.init.normal_(layer.weight, mean=0.0, std=1.0)
            nn.init.zeros_(layer.bias)

    def forward(self, x):
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.out(x)


def main():
    x, y = make_activity_data()
    x_train, y_train, x_val, y_val = x[:3200], y[:3200], x[3200:], y[3200:]
    model = ActivityNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    history = []

    for step in range(200):
        idx = torch.randint(0, len(x_train), (64,))
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 40 == 0:
            print(f"step {step:3d}  loss {loss.item():.4g}")

    with torch.no_grad():
        acc = (model(x_val).argmax(1) == y_val).float().mean().item()
    print(f"val accuracy {acc:.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
