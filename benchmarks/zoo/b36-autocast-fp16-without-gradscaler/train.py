import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

device = "cuda" if torch.cuda.is_available() else "cpu"
IMG = 20


def make_strokes(n, seed):
    """20x20 images in [0, 1]: a few blurred line segments each (sketch-like)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(IMG, dtype=torch.float32), torch.arange(IMG, dtype=torch.float32),
                            indexing="ij")
    img = torch.zeros(n, IMG, IMG)
    for _ in range(3):
        p0 = torch.rand(n, 2, generator=g) * 14 + 3
        p1 = torch.rand(n, 2, generator=g) * 14 + 3
        for s in torch.linspace(0, 1, 10):
            p = p0 + s * (p1 - p0)
            img += torch.exp(-((xx - p[:, 0, None, None]) ** 2 + (yy - p[:, 1, None, None]) ** 2) / 1.5)
    return img.clamp(0, 1).view(n, -1)


class DenoisingAutoencoder(nn.Module):
    def __init__(self, latent=32):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(IMG * IMG, 128), nn.ReLU(), nn.Linear(128, latent))
        self.decoder = nn.Sequential(nn.Linear(latent, 128), nn.ReLU(), nn.Linear(128, IMG * IMG))

    def forward(self, x):
        return torch.sigmoid(self.decoder(self.encoder(x)))


def main():
    data = make_strokes(2048, seed=1).to(device)
    model = DenoisingAutoencoder().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    history = []

    for step in range(100):
        idx = torch.randint(0, len(data), (128,), device=device)
        clean = data[idx]
        noisy = (clean + 0.3 * torch.randn_like(clean)).clamp(0, 1)
        with torch.autocast(device_type=device, dtype=torch.float16):
            recon = model(noisy)
            loss = F.mse_loss(recon, clean)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 20 == 0:
            print(f"step {step:3d}  reconstruction mse {loss.item():.5f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
