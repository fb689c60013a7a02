"""Plain torch: the LSTM learns the task, and its forget gates do sit near 1 (by design)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.manual_seed(0)
losses, model = train.main(verbose=False)
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"loss: first 10 steps {first:.3f}, last 10 steps {last:.3f}")
assert last < 0.3 * first, (first, last)

x, y = train.make_data(512)
with torch.no_grad():
    acc = (model(x).argmax(1) == y).float().mean().item()
    bias_f = model.cell.gates.bias[train.HIDDEN:2 * train.HIDDEN]
    share = (torch.sigmoid(bias_f) > 0.9).float().mean().item()
print(f"accuracy {acc:.1%}; forget gates with sigmoid(bias) > 0.9: {share:.0%}")
assert acc > 0.9
print("PASS")
