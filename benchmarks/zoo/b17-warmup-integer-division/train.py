import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

torch.manual_seed(0)

IMG = 12
NUM_CLASSES = 4
WARMUP_STEPS = 100
TOTAL_STEPS = 160


def make_shapes(n, seed):
    """Noisy 12x12 images of four shapes: square, cross, horizontal bar, vertical bar."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    images = 0.3 * torch.randn(n, 1, IMG, IMG, generator=g)
    for i in range(n):
        r, c = torch.randint(2, IMG - 6, (2,), generator=g).tolist()
        kind = labels[i].item()
        if kind == 0:
            images[i, 0, r:r + 4, c:c + 4] += 1.0
        elif kind == 1:
            images[i, 0, r + 2, c:c + 5] += 1.0
            images[i, 0, r:r + 5, c + 2] += 1.0
        elif kind == 2:
            images[i, 0, r + 2, c:c + 6] += 1.0
        else:
            images[i, 0, r:r + 6, c + 2] += 1.0
    return images, labels


class ShapeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 3 * 3, NUM_CLASSES)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def warmup_then_constant(step):
    return min(1.0, step // WARMUP_STEPS)


def main():
    images, labels = make_shapes(2000, seed=1)
    model = ShapeNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    scheduler = LambdaLR(optimizer, lr_lambda=warmup_then_constant)
    history = []

    for step in range(TOTAL_STEPS):
        idx = torch.randint(0, len(images), (32,))
        loss = F.cross_entropy(model(images[idx]), labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        history.append(loss.item())
        if step % 20 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
