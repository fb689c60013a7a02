"""Plain torch: the tied weight is one Parameter that receives both gradients, and the LM
learns the grammar (per-character loss falls far below the uniform ln V)."""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

data, chars = train.make_corpus()
torch.manual_seed(0)
model = train.TiedLSTMLM(len(chars))
assert model.decoder.weight is model.encoder.weight
assert sum(1 for p in model.parameters() if p is model.encoder.weight) == 1
x, y = train.get_batch(data, torch.Generator().manual_seed(3))
model.eval()
F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1)).backward()
grad_both = model.encoder.weight.grad.clone()
# the gradient through the output layer alone touches every row; the lookup adds to used rows
assert (grad_both != 0).all(dim=1).float().mean() > 0.9

torch.manual_seed(0)
losses, model = train.main(verbose=False)
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"loss: first 10 steps {first:.3f}, last 10 steps {last:.3f} (uniform: ln {len(chars)} = "
      f"{math.log(len(chars)):.3f})")
assert last < 0.3 * first, (first, last)
print("PASS")
