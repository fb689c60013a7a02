"""A ReLU MLP on 8x8 "glyph" images with pixel intensities in [0, 1] (as torchvision's
ToTensor gives), PyTorch's default initialisation, Adam 1e-3.

With non-negative, sparse inputs a few hidden units have a negative pre-activation on every
image and stay silent; that is normal for a ReLU network of this width (a handful of the
256 + 256 units), not a dying-ReLU collapse: the network trains fine.
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

SIDE, CLASSES = 8, 10
N, BATCH, STEPS = 4096, 64, 200


def make_data(n, seed=1):
    """One stroke pattern per class (a few lit pixels), random shifts, dropout of pixels, noise."""
    g = torch.Generator().manual_seed(1)
    protos = (torch.rand(CLASSES, SIDE, SIDE, generator=g) < 0.25).float()
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, CLASSES, (n,), generator=g)
    img = protos[y]
    shifts = torch.randint(-1, 2, (n, 2), generator=g)
    img = torch.stack([torch.roll(im, (int(a), int(b)), dims=(0, 1)) for im, (a, b) in zip(img, shifts)])
    img = img * (torch.rand(n, SIDE, SIDE, generator=g) > 0.15)
    img = (img * (0.6 + 0.4 * torch.rand(n, SIDE, SIDE, generator=g))
           + 0.1 * torch.rand(n, SIDE, SIDE, generator=g)).clamp(0, 1)
    return img.view(n, -1), y


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(SIDE * SIDE, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, CLASSES)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def main(steps=STEPS, verbose=True):
    x, y = make_data(N)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, N, (BATCH,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 25 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.4f}")
    return losses, model


if __name__ == "__main__":
    main()
