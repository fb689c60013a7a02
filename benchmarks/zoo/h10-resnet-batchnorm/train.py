"""A small ResNet (conv-BN-ReLU, basic residual blocks, a strided stage with a 1x1
projection shortcut, global average pooling) on synthetic 16x16 texture images.

Convolutions feeding a BatchNorm have bias=False, the last BN of each residual branch
starts at gamma = 0 ("zero-init residual", Goyal et al. 2017), and the script switches
between model.train() and model.eval() for a held-out check, as usual.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

CLASSES, SIZE = 4, 16
N, BATCH, STEPS = 2048, 32, 120


def make_data(n, seed=1):
    """Oriented gratings (one orientation per class) with random phase, frequency jitter and noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, CLASSES, (n,), generator=g)
    angle = y.float() * math.pi / CLASSES + 0.15 * torch.randn(n, generator=g)
    freq = 2.0 + 0.5 * torch.rand(n, generator=g)
    phase = 2 * math.pi * torch.rand(n, generator=g)
    coords = torch.linspace(-1, 1, SIZE)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    proj = torch.cos(angle)[:, None, None] * xx + torch.sin(angle)[:, None, None] * yy
    img = torch.sin(math.pi * freq[:, None, None] * proj + phase[:, None, None])
    color = 0.5 + torch.rand(n, 3, 1, 1, generator=g)
    x = img[:, None] * color + 0.5 * torch.randn(n, 3, SIZE, SIZE, generator=g)
    return x, y


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        nn.init.zeros_(self.bn2.weight)                      # zero-init residual
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = BasicBlock(16, 16)
        self.layer2 = BasicBlock(16, 32, stride=2)
        self.fc = nn.Linear(32, CLASSES)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main(steps=STEPS, verbose=True):
    x, y = make_data(N)
    x_val, y_val = make_data(256, seed=2)
    model = ResNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    losses = []
    for step in range(steps):
        model.train()
        idx = torch.randint(0, N, (BATCH,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 20 == 0:
            model.eval()
            with torch.no_grad():
                acc = (model(x_val).argmax(1) == y_val).float().mean().item()
            print(f"step {step + 1:3d}  loss {loss.item():.4f}  val acc {acc:.2f}")
    return losses, model


if __name__ == "__main__":
    main()
