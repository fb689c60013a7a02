import torch
import torch.nn as nn

torch.manual_seed(0)

N_FEATURES = 40
N_TAGS = 12


def make_tagging_data(n, seed=0):
    """Document embeddings -> a set of topic tags (multi-label, ~3 tags per document)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, N_FEATURES, generator=g)
    w = torch.randn(N_FEATURES, N_TAGS, generator=g) / N_FEATURES ** 0.5
    scores = x @ w * 3 - 1.5
    tags = (torch.rand(n, N_TAGS, generator=g) < torch.sigmoid(scores)).float()
    return x, tags


class TagPredictor(nn.Module):
    def __init__(self, hidden=128, dropout=0.2):
        super().__init__()
        self.fc1 = nn.Linear(N_FEATURES, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, N_TAGS)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = self.drop(torch.relu(self.fc1(x)))
        x = self.drop(torch.relu(self.fc2(x)))
        return torch.sigmoid(self.out(x))


def f1_score(probs, targets, threshold=0.5):
    pred = (probs > threshold).float()
    tp = (pred * targets).sum()
    return (2 * tp / (pred.sum() + targets.sum()).clamp_min(1)).item()


def main():
    x, y = make_tagging_data(4000)
    x_train, y_train, x_val, y_val = x[:3500], y[:3500], x[3500:], y[3500:]
    model = TagPredictor()
    criterion = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    history = []

    for step in range(200):
        idx = torch.randint(0, len(x_train), (128,))
        model.train()
        loss = criterion(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 40 == 0 or step == 199:
            model.eval()
            with torch.no_grad():
                f1 = f1_score(model(x_val), y_val)
            print(f"step {step:3d}  loss {loss.item():.4f}  val F1 {f1:.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
