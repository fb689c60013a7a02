import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

N_IMAGES = 2000
N_VAL = 200
BATCH_SIZE = 32
STEPS = 150
SHAPES = ["circle", "square", "hbar", "vbar"]


def render_shapes(n, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32),
                            torch.arange(size, dtype=torch.float32), indexing="ij")
    labels = torch.randint(0, len(SHAPES), (n,), generator=g)
    cx = 8 + 16 * torch.rand(n, 1, 1, generator=g)
    cy = 8 + 16 * torch.rand(n, 1, 1, generator=g)
    r = 4 + 4 * torch.rand(n, 1, 1, generator=g)
    circle = (((xx - cx) ** 2 + (yy - cy) ** 2).sqrt() < r).float()
    square = (((xx - cx).abs() < r) & ((yy - cy).abs() < r)).float()
    hbar = (((yy - cy).abs() < 2) & ((xx - cx).abs() < 1.5 * r)).float()
    vbar = (((xx - cx).abs() < 2) & ((yy - cy).abs() < 1.5 * r)).float()
    canvas = torch.stack([circle, square, hbar, vbar], dim=1)[torch.arange(n), labels]
    images = canvas + 0.2 * torch.rand(n, size, size, generator=g)
    return images.unsqueeze(1), labels


class ShapeNet(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 64, 3, padding=1)
        self.classifier = nn.Linear(64, n_classes)
        self._init_weights()

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.conv3(x))
        x = x.mean(dim=(2, 3))
        return self.classifier(x)


def main():
    images, labels = render_shapes(N_IMAGES)
    x_train, y_train = images[:-N_VAL], labels[:-N_VAL]
    x_val, y_val = images[-N_VAL:], labels[-N_VAL:]

    model = ShapeNet(len(SHAPES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    for step in range(STEPS):
        idx = torch.randint(0, len(x_train), (BATCH_SIZE,))
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            with torch.no_grad():
                acc = (model(x_val).argmax(1) == y_val).float().mean().item()
            print(f"step {step:3d}  loss {loss.item():.4f}  val acc {acc:.3f}")


if __name__ == "__main__":
    main()
