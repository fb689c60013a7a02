"""Plain torch: the accumulated gradient equals the full-batch gradient, and the model trains."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.manual_seed(0)
x, y = train.make_data(256)
model = train.Net()
xb, yb = x[:train.MICRO_BATCH * train.ACCUM], y[:train.MICRO_BATCH * train.ACCUM]
# accumulated over micro-batches
model.zero_grad()
for k in range(train.ACCUM):
    sl = slice(k * train.MICRO_BATCH, (k + 1) * train.MICRO_BATCH)
    (F.cross_entropy(model(xb[sl]), yb[sl]) / train.ACCUM).backward()
acc = [p.grad.clone() for p in model.parameters()]
# one big batch
model.zero_grad()
F.cross_entropy(model(xb), yb).backward()
full = [p.grad.clone() for p in model.parameters()]
err = max((a - b).abs().max().item() for a, b in zip(acc, full))
print(f"max |accumulated - full-batch| gradient difference: {err:.2e}")
assert err < 1e-5, err

torch.manual_seed(0)
losses = train.main(verbose=False)
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"loss: first 5 steps {first:.3f}, last 5 steps {last:.3f}")
assert last < 0.5 * first, (first, last)
print("PASS")
