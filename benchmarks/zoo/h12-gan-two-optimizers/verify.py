"""Plain torch: the generator's samples move onto the data (the MMD to real samples falls
by a large factor), and alternating updates leave each network's .grad to its own optimizer."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402


def mmd(a, b, s=0.5):
    k = lambda x, y: torch.exp(-torch.cdist(x, y) ** 2 / (2 * s * s)).mean()  # noqa: E731
    return (k(a, a) + k(b, b) - 2 * k(a, b)).item()


real = train.sample_real(2000, torch.Generator().manual_seed(5))
torch.manual_seed(0)
with torch.no_grad():
    before = mmd(train.Generator()(torch.randn(2000, train.Z)), real)
torch.manual_seed(0)
history, gen = train.main(verbose=False)
with torch.no_grad():
    samples = gen(torch.randn(2000, train.Z))
after = mmd(samples, real)
radius = samples.norm(dim=1).mean().item()
print(f"MMD(generated, real): untrained {before:.3f}, trained {after:.3f}; mean radius {radius:.2f} "
      f"(data {train.RADIUS})")
assert after < 0.2 * before, (before, after)
assert all(torch.isfinite(torch.tensor(h)).all() for h in history)
print("PASS")
