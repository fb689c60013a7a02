import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

SIZE = 32


def make_cells(n, seed):
    """Microscopy-like 32x32 images with 1-3 bright elliptical cells and their binary masks."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(SIZE, dtype=torch.float32), torch.arange(SIZE, dtype=torch.float32),
                            indexing="ij")
    masks = torch.zeros(n, 1, SIZE, SIZE)
    for _ in range(3):
        keep = (torch.rand(n, 1, 1, generator=g) < 0.7).float()
        cy, cx = [torch.rand(n, 1, 1, generator=g) * 22 + 5 for _ in range(2)]
        ry, rx = [torch.rand(n, 1, 1, generator=g) * 4 + 3 for _ in range(2)]
        inside = (((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 < 1).float() * keep
        masks[:, 0] = torch.maximum(masks[:, 0], inside)
    images = 0.8 * F.avg_pool2d(masks, 3, 1, 1) + 0.35 * torch.randn(n, 1, SIZE, SIZE, generator=g)
    return images, masks


class TinyUNet(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
        self.enc2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.dec = nn.Sequential(nn.Conv2d(2 * c, c, 3, padding=1), nn.ReLU())
        self.out = nn.Conv2d(c, 1, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        d = self.dec(torch.cat([self.up(e2), e1], dim=1))
        return self.out(d)


def dice_loss(logits, target, eps=1.0):
    pred = (torch.sigmoid(logits) > 0.5).float()
    inter = (pred * target).sum(dim=(1, 2, 3))
    union = pred.sum(dim=(1, 2, 3)) + target.sum(dim=(1, 2, 3))
    return 1 - ((2 * inter + eps) / (union + eps)).mean()


def main():
    images, masks = make_cells(600, seed=1)
    model = TinyUNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    history = []

    for step in range(80):
        idx = torch.randint(0, len(images), (16,))
        loss = dice_loss(model(images[idx]), masks[idx])
        loss.requires_grad = True
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 10 == 0:
            print(f"step {step:3d}  dice loss {loss.item():.4f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
