"""A GAN on a 2-D mixture of 8 Gaussians, with one optimizer per network.

The standard alternating recipe (DCGAN / PyTorch tutorial): the discriminator step sees
fake.detach(), so the generator gets no gradient there; the generator step uses the
non-saturating loss BCE(D(G(z)), 1), whose backward also fills D's .grad — which
d_opt.zero_grad() clears before D's next step. Each optimizer zeroes and steps only its
own network. Adam(0.5, 0.999) as in DCGAN.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

Z, BATCH, STEPS = 8, 128, 300
MODES = 8
RADIUS, STD = 2.0, 0.1


def centers():
    angles = torch.arange(MODES) * 2 * math.pi / MODES
    return torch.stack([RADIUS * torch.cos(angles), RADIUS * torch.sin(angles)], dim=1)


def sample_real(n, g):
    idx = torch.randint(0, MODES, (n,), generator=g)
    return centers()[idx] + STD * torch.randn(n, 2, generator=g)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(Z, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 2))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 128), nn.LeakyReLU(0.2), nn.Linear(128, 128), nn.LeakyReLU(0.2),
                                 nn.Linear(128, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def main(steps=STEPS, verbose=True):
    g = torch.Generator().manual_seed(1)
    gen, disc = Generator(), Discriminator()
    g_opt = torch.optim.Adam(gen.parameters(), lr=1e-3, betas=(0.5, 0.999))
    d_opt = torch.optim.Adam(disc.parameters(), lr=1e-3, betas=(0.5, 0.999))
    ones, zeros = torch.ones(BATCH), torch.zeros(BATCH)
    history = []
    for step in range(steps):
        # discriminator: real -> 1, fake -> 0 (fake detached: no gradient to G)
        real = sample_real(BATCH, g)
        fake = gen(torch.randn(BATCH, Z))
        d_loss = (F.binary_cross_entropy_with_logits(disc(real), ones)
                  + F.binary_cross_entropy_with_logits(disc(fake.detach()), zeros))
        d_opt.zero_grad()
        d_loss.backward()
        d_opt.step()
        # generator: non-saturating loss
        g_loss = F.binary_cross_entropy_with_logits(disc(fake), ones)
        g_opt.zero_grad()
        g_loss.backward()
        g_opt.step()
        history.append((d_loss.item(), g_loss.item()))
        if verbose and (step + 1) % 25 == 0:
            print(f"step {step + 1:3d}  d_loss {d_loss.item():.4f}  g_loss {g_loss.item():.4f}")
    return history, gen


if __name__ == "__main__":
    main()
