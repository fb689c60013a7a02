"""Plain torch: the MLP trains and generalises, while a minority of its ReLU units are silent
on every held-out image."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.manual_seed(0)
losses, model = train.main(verbose=False)
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
x, y = train.make_data(2048, seed=2)
with torch.no_grad():
    h1 = F.relu(model.fc1(x))
    h2 = F.relu(model.fc2(h1))
    acc = (model(x).argmax(1) == y).float().mean().item()
dead1 = (h1.max(0).values == 0).float().mean().item()
dead2 = (h2.max(0).values == 0).float().mean().item()
print(f"loss: first 10 steps {first:.3f}, last 10 steps {last:.3f}; held-out accuracy {acc:.1%}")
print(f"units silent on all 2048 held-out images: fc1 {dead1:.1%}, fc2 {dead2:.1%}")
assert last < 0.2 * first and acc > 0.9, (first, last, acc)
assert dead1 + dead2 > 0 and max(dead1, dead2) < 0.25
print("PASS")
