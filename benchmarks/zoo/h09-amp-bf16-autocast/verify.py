"""Plain torch: under bfloat16 autocast the weights and gradients stay float32, no gradient
underflows, and the model trains as well as in float32."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

x, y = train.make_data(256)
torch.manual_seed(0)
model = train.Net()
with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
    logits = model(x)
    loss = F.cross_entropy(logits, y)
assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
loss.backward()
for name, p in model.named_parameters():
    assert p.dtype == torch.float32 and p.grad.dtype == torch.float32, name
    assert (p.grad != 0).float().mean() > 0.5, f"{name}: gradient mostly zero"
print("float32 weights and gradients; no parameter's gradient is flushed to zero")

torch.manual_seed(0)
losses, model = train.main(verbose=False)
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"loss: first 10 steps {first:.3f}, last 10 steps {last:.3f}")
assert last < 0.5 * first, (first, last)
print("PASS")
