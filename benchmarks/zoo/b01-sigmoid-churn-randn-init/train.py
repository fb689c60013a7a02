import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(7)

N_CUSTOMERS = 4096
N_FEATURES = 64
BATCH_SIZE = 128
EPOCHS = 5


def make_churn_data(n, d):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, d, generator=g)
    w_true = torch.randn(d, generator=g) / d ** 0.5
    tenure_effect = 0.8 * x[:, 0] * x[:, 1]
    logits = x @ w_true + tenure_effect
    y = (logits + 0.3 * torch.randn(n, generator=g) > 0).float()
    return x, y


class ChurnNet(nn.Module):
    def __init__(self, n_features, hidden=512):
        super().__init__()
        self.fc1 = nn.Linear(n_features, hidden)
        self.act1 = nn.Sigmoid()
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = nn.Sigmoid()
        self.head = nn.Linear(hidden, 1)
        self.reset_parameters()

    def reset_parameters(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=1.0)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        h = self.act1(self.fc1(x))
        h = self.act2(self.fc2(h))
        return self.head(h).squeeze(-1)


def main():
    x, y = make_churn_data(N_CUSTOMERS, N_FEATURES)
    n_train = int(0.8 * N_CUSTOMERS)
    x_train, y_train = x[:n_train], y[:n_train]
    x_val, y_val = x[n_train:], y[n_train:]

    model = ChurnNet(N_FEATURES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    step = 0
    for epoch in range(EPOCHS):
        perm = torch.randperm(n_train)
        for i in range(0, n_train, BATCH_SIZE):
            idx = perm[i:i + BATCH_SIZE]
            logits = model(x_train[idx])
            loss = F.binary_cross_entropy_with_logits(logits, y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 10 == 0:
                print(f"epoch {epoch} step {step:4d}  loss {loss.item():.4f}")
            step += 1

        with torch.no_grad():
            val_pred = (model(x_val) > 0).float()
            acc = (val_pred == y_val).float().mean().item()
        print(f"epoch {epoch}  val acc {acc:.3f}")


if __name__ == "__main__":
    main()
