"""A variational autoencoder on synthetic 12x12 images of blobs.

Encoder -> (mu, logvar), the reparameterisation z = mu + exp(0.5 * logvar) * eps, decoder
-> pixel logits; the loss is the negative ELBO per example: Bernoulli reconstruction with
binary_cross_entropy_with_logits (summed over pixels) plus the analytic KL to N(0, I).
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

SIDE, LATENT = 12, 4
PIXELS = SIDE * SIDE
N, BATCH, STEPS = 4096, 64, 250


def make_data(n, seed=1):
    """Each image: a Gaussian blob at a random position with a random width; intensities in
    [0, 1] used as Bernoulli means (as MNIST pixels are)."""
    g = torch.Generator().manual_seed(seed)
    pos = 1.5 + (SIDE - 4) * torch.rand(n, 2, generator=g)
    width = 1.0 + 1.5 * torch.rand(n, 1, 1, generator=g)
    coords = torch.arange(SIDE).float()
    dy = coords[None, :, None] - pos[:, 0, None, None]
    dx = coords[None, None, :] - pos[:, 1, None, None]
    img = torch.exp(-(dx ** 2 + dy ** 2) / (2 * width ** 2))
    return img.reshape(n, PIXELS)


class VAE(nn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(PIXELS, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, LATENT)
        self.logvar = nn.Linear(hidden, LATENT)
        self.dec = nn.Sequential(nn.Linear(LATENT, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, PIXELS))

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)      # reparameterisation
        return self.dec(z), mu, logvar


def neg_elbo(logits, x, mu, logvar):
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.shape[0]
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.shape[0]
    return recon + kl, recon, kl


def main(steps=STEPS, verbose=True):
    x = make_data(N)
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, N, (BATCH,))
        logits, mu, logvar = model(x[idx])
        loss, recon, kl = neg_elbo(logits, x[idx], mu, logvar)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 25 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.2f}  recon {recon.item():.2f}  kl {kl.item():.2f}")
    return losses, model


if __name__ == "__main__":
    main()
