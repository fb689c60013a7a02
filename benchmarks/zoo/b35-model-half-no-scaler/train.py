import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

N_PARAMS = 16
N_BINS = 64
device = "cuda" if torch.cuda.is_available() else "cpu"


def simulate_spectra(n, seed=0):
    """Physical parameters -> normalised emission spectrum (64 bins) from a sum of three lines."""
    g = torch.Generator().manual_seed(seed)
    theta = torch.rand(n, N_PARAMS, generator=g)
    wl = torch.linspace(0, 1, N_BINS)
    centers = theta[:, :3].unsqueeze(-1)
    widths = 0.02 + 0.08 * theta[:, 3:6].unsqueeze(-1)
    heights = theta[:, 6:9].unsqueeze(-1)
    spectra = (heights * torch.exp(-(wl - centers) ** 2 / (2 * widths ** 2))).sum(1)
    spectra = spectra / spectra.sum(-1, keepdim=True)
    return theta, spectra


class SpectrumEmulator(nn.Module):
    def __init__(self, hidden=128):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(N_PARAMS, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, N_BINS),
        )

    def forward(self, theta):
        return self.net(theta)


def main():
    theta, spectra = simulate_spectra(8192)
    theta, spectra = theta.to(device).half(), spectra.to(device).half()
    model = SpectrumEmulator().to(device).half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    history = []

    for step in range(150):
        idx = torch.randint(0, len(theta), (256,), device=device)
        pred = model(theta[idx])
        loss = F.mse_loss(pred, spectra[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 30 == 0:
            print(f"step {step:3d}  mse {loss.item():.3e}")
    return model, history


if __name__ == "__main__":
    model, history = main()
