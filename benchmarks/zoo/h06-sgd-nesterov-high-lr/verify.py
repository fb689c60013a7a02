"""Plain torch: with SGD lr 0.1 + Nesterov the loss falls steadily and never blows up."""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.manual_seed(0)
losses, model = train.main(verbose=False)
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"loss: first 10 steps {first:.3f}, last 10 steps {last:.3f}, max after step 10 {max(losses[10:]):.3f}")
assert all(math.isfinite(v) for v in losses)
assert last < 0.5 * first, (first, last)
assert max(losses[10:]) < losses[0] * 1.2
x, y = train.make_data(2048)
with torch.no_grad():
    acc = (model(x).argmax(1) == y).float().mean().item()
print(f"accuracy {acc:.1%} (chance {1 / train.CLASSES:.1%})")
print("PASS")
