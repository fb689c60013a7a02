"""A GAN with two optimizers and alternating steps, in the idiom of pytorch/examples dcgan:
the discriminator steps on its real + fake losses, then the generator on its own.

    python gan_two_optimizers.py [--iters N]
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=400)
args = parser.parse_args()
torch.manual_seed(0)


def real_batch(n):
    """A ring of eight Gaussians, the usual toy target of a GAN."""
    angle = torch.randint(0, 8, (n,)).float() * (2 * torch.pi / 8)
    centres = torch.stack([torch.cos(angle), torch.sin(angle)], dim=1) * 2.0
    return centres + 0.05 * torch.randn(n, 2)


netG = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
netD = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
criterion = nn.BCEWithLogitsLoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))

for i in range(args.iters):
    real = real_batch(64)
    ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
    # (1) update D: maximize log(D(x)) + log(1 - D(G(z)))
    netD.zero_grad()
    errD_real = criterion(netD(real), ones)
    errD_real.backward()
    fake = netG(torch.randn(64, 8))
    errD_fake = criterion(netD(fake.detach()), zeros)
    errD_fake.backward()
    optimizerD.step()
    # (2) update G: maximize log(D(G(z)))
    netG.zero_grad()
    errG = criterion(netD(fake), ones)
    errG.backward()
    optimizerG.step()
    if i % 50 == 0:
        print(f"[{i}] Loss_D: {(errD_real + errD_fake).item():.4f} Loss_G: {errG.item():.4f}")
