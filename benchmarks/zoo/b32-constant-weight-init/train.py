import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

SIGNAL_LEN = 128
N_CLASSES = 3


def make_heartbeats(n, seed):
    """1-lead signals: normal rhythm, fast rhythm, irregular rhythm, with baseline wander and noise."""
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, SIGNAL_LEN)
    labels = torch.randint(0, N_CLASSES, (n,), generator=g)
    signals = torch.empty(n, 1, SIGNAL_LEN)
    for i in range(n):
        rate = [4.0, 8.0, 5.0][labels[i]]
        phase = torch.rand(1, generator=g).item()
        beat_times = torch.arange(phase / rate, 1.0, 1.0 / rate)
        if labels[i] == 2:
            beat_times = beat_times + 0.05 * torch.randn(len(beat_times), generator=g)
        spikes = torch.exp(-((t.view(-1, 1) - beat_times.view(1, -1)) ** 2) / 2e-4).sum(1)
        wander = 0.3 * torch.sin(2 * math.pi * (0.5 * t + torch.rand(1, generator=g)))
        signals[i, 0] = spikes + wander + 0.1 * torch.randn(SIGNAL_LEN, generator=g)
    return signals, labels


class RhythmCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, 16, kernel_size=7, padding=3), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(16, 32, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(32, 32, kernel_size=5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(8),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 8, 64), nn.ReLU(),
                                        nn.Linear(64, N_CLASSES))

    def forward(self, x):
        return self.classifier(self.features(x))


def weights_init(m):
    if isinstance(m, (nn.Conv1d, nn.Linear)):
        nn.init.constant_(m.weight, 0.05)
        nn.init.zeros_(m.bias)


def main():
    signals, labels = make_heartbeats(1200, seed=1)
    model = RhythmCNN()
    model.apply(weights_init)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    history = []

    for step in range(150):
        idx = torch.randint(0, len(signals), (32,))
        logits = model(signals[idx])
        loss = F.cross_entropy(logits, labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 30 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")

    with torch.no_grad():
        acc = (model(signals).argmax(1) == labels).float().mean().item()
    print(f"train accuracy {acc:.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
