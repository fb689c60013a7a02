import math

import torch
import torch.nn as nn

torch.manual_seed(0)

LATENT = 8
BATCH = 128


def sample_ring(n, modes=8, radius=2.0, std=0.05):
    """A ring of eight Gaussians, the classic 2-D GAN toy problem."""
    k = torch.randint(0, modes, (n,))
    angle = 2 * math.pi * k.float() / modes
    centers = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return centers + std * torch.randn(n, 2)


class Generator(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(LATENT, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.LeakyReLU(0.2),
                                 nn.Linear(hidden, hidden), nn.LeakyReLU(0.2),
                                 nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x)


def main():
    netG, netD = Generator(), Discriminator()
    criterion = nn.BCEWithLogitsLoss()
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real_label = torch.ones(BATCH, 1)
    fake_label = torch.zeros(BATCH, 1)
    d_hist, g_hist = [], []

    for it in range(300):
        real = sample_ring(BATCH)
        z = torch.randn(BATCH, LATENT)
        fake = netG(z)

        netD.zero_grad()
        errD = criterion(netD(real), real_label) + criterion(netD(fake.detach()), fake_label)
        errD.backward()
        optD.step()

        errG = criterion(netD(fake), real_label)
        errG.backward()
        optG.step()

        d_hist.append(errD.item())
        g_hist.append(errG.item())
        if it % 50 == 0:
            print(f"iter {it:3d}  loss_D {errD.item():.4f}  loss_G {errG.item():.4f}")

    with torch.no_grad():
        samples = netG(torch.randn(1000, LATENT))
        radius = samples.norm(dim=1)
    print(f"generated radius mean {radius.mean():.3f} std {radius.std():.3f} (target 2.0)")
    return netG, netD, d_hist, g_hist


if __name__ == "__main__":
    netG, netD, d_hist, g_hist = main()
