import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(11)

N_SAMPLES = 4000
DATA_DIM = 48
LATENT_DIM = 8
HIDDEN = 256
BATCH_SIZE = 100
EPOCHS = 4


def make_spectra(n, d, seed=11):
    g = torch.Generator().manual_seed(seed)
    wavelengths = torch.linspace(0, 1, d)
    centers = torch.rand(n, 3, generator=g)
    widths = 0.03 + 0.07 * torch.rand(n, 3, generator=g)
    heights = torch.rand(n, 3, generator=g)
    peaks = heights[:, :, None] * torch.exp(
        -((wavelengths[None, None, :] - centers[:, :, None]) ** 2) / (2 * widths[:, :, None] ** 2)
    )
    spectra = peaks.sum(1) + 0.02 * torch.randn(n, d, generator=g)
    return (spectra - spectra.mean()) / spectra.std()


def mlp(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers)


class SpectraVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = mlp([DATA_DIM, HIDDEN, HIDDEN, HIDDEN, HIDDEN])
        self.to_mu = nn.Linear(HIDDEN, LATENT_DIM)
        self.to_logvar = nn.Linear(HIDDEN, LATENT_DIM)
        self.decoder = mlp([LATENT_DIM, HIDDEN, HIDDEN, HIDDEN, HIDDEN])
        self.to_x = nn.Linear(HIDDEN, DATA_DIM)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=0.01)
                nn.init.constant_(m.bias, 0.0)

    def forward(self, x):
        h = self.encoder(x)
        mu, logvar = self.to_mu(h), self.to_logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.to_x(self.decoder(z)), mu, logvar


def vae_loss(recon, x, mu, logvar):
    rec = F.mse_loss(recon, x, reduction="sum") / x.shape[0]
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.shape[0]
    return rec + kl, rec, kl


def main():
    data = make_spectra(N_SAMPLES, DATA_DIM)
    model = SpectraVAE()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    step = 0
    for epoch in range(EPOCHS):
        perm = torch.randperm(N_SAMPLES)
        for i in range(0, N_SAMPLES, BATCH_SIZE):
            x = data[perm[i:i + BATCH_SIZE]]
            recon, mu, logvar = model(x)
            loss, rec, kl = vae_loss(recon, x, mu, logvar)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 20 == 0:
                print(f"epoch {epoch} step {step:3d}  loss {loss.item():.3f}  rec {rec.item():.3f}  kl {kl.item():.4f}")
            step += 1


if __name__ == "__main__":
    main()
