import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


class TinyResNet(nn.Module):
    def __init__(self, num_classes=10, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = ResidualBlock(width)
        self.layer2 = ResidualBlock(width)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(self.pool(x).flatten(1))


def make_color_patches(n, num_classes, seed):
    """16x16 RGB images whose class is the dominant colour of a blurred patch."""
    g = torch.Generator().manual_seed(seed)
    palette = torch.rand(num_classes, 3, generator=g) * 2 - 1
    labels = torch.randint(0, num_classes, (n,), generator=g)
    images = 0.5 * torch.randn(n, 3, 16, 16, generator=g)
    for i in range(n):
        r, c = torch.randint(0, 8, (2,), generator=g).tolist()
        images[i, :, r:r + 8, c:c + 8] += palette[labels[i]].view(3, 1, 1)
    return images, labels


def build_optimizer(model, lr=0.05):
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)


def main():
    num_classes = 5
    images, labels = make_color_patches(1500, num_classes, seed=1)

    model = TinyResNet()
    optimizer = build_optimizer(model)
    if num_classes != model.fc.out_features:
        model.fc = nn.Linear(model.fc.in_features, num_classes)

    history = []
    for step in range(100):
        idx = torch.randint(0, len(images), (32,))
        loss = F.cross_entropy(model(images[idx]), labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 20 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
