import torch
import torch.nn as nn

torch.manual_seed(0)

N_CLASSES = 6


def load_wine_quality(n=3000, seed=21):
    """11 standardised physico-chemical measurements -> quality grade 0..5."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 11, generator=g)
    w = torch.randn(11, generator=g)
    score = x @ w / 11 ** 0.5 + 0.3 * torch.randn(n, generator=g)
    edges = torch.tensor([-1.5, -0.6, 0.0, 0.6, 1.5])
    grade = torch.bucketize(score, edges)
    return x, grade.float().unsqueeze(1)


model = nn.Sequential(
    nn.Linear(11, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, N_CLASSES),
    nn.Softmax(dim=1),
)

x, y = load_wine_quality()
x_train, y_train, x_test, y_test = x[:2500], y[:2500], x[2500:], y[2500:]
loss_fn = nn.MSELoss()
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
history = []

for epoch in range(8):
    perm = torch.randperm(len(x_train))
    for i in range(0, len(x_train), 100):
        idx = perm[i:i + 100]
        loss = loss_fn(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    with torch.no_grad():
        acc = (model(x_test).argmax(1) == y_test.squeeze(1).long()).float().mean().item()
    print(f"epoch {epoch}  loss {history[-1]:.4f}  test accuracy {acc:.3f}")
