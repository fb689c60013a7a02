"""Plain torch: the classifier trains and generalises; in eval mode dropout is off
(deterministic outputs)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.manual_seed(0)
losses, model = train.main(verbose=False)
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
x_val, y_val = train.make_data(1024, seed=3)
model.eval()
with torch.no_grad():
    out1, out2 = model(x_val), model(x_val)
    acc = (out1.argmax(1) == y_val).float().mean().item()
assert torch.equal(out1, out2)
print(f"loss: first 10 steps {first:.3f}, last 10 steps {last:.3f}; held-out accuracy {acc:.1%}")
assert last < 0.2 * first and acc > 0.9, (first, last, acc)
print("PASS")
