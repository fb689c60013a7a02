import torch
import torch.nn as nn

torch.manual_seed(0)

NUM_CLASSES = 10


def make_dataset(n, seed):
    """Grayscale 16x16 images: each class is a smooth random prototype, plus per-image noise."""
    g = torch.Generator().manual_seed(123)
    prototypes = torch.nn.functional.avg_pool2d(torch.randn(NUM_CLASSES, 1, 20, 20, generator=g), 5, 1)
    g.manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    images = prototypes[labels] * 2 + 0.6 * torch.randn(n, 1, 16, 16, generator=g)
    return images, labels


model = nn.Sequential(
    nn.Conv2d(1, 16, kernel_size=3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(16, 32, kernel_size=3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Linear(32 * 4 * 4, 64),
    nn.ReLU(),
    nn.Linear(64, NUM_CLASSES),
    nn.Softmax(dim=1),
)

train_x, train_y = make_dataset(3000, seed=1)
test_x, test_y = make_dataset(500, seed=2)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
history = []

for epoch in range(3):
    perm = torch.randperm(len(train_x))
    for i in range(0, 2048, 64):
        idx = perm[i:i + 64]
        outputs = model(train_x[idx])
        loss = criterion(outputs, train_y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    with torch.no_grad():
        acc = (model(test_x).argmax(1) == test_y).float().mean().item()
    print(f"epoch {epoch}  loss {sum(history[-32:]) / 32:.4f}  test acc {acc:.3f}")
