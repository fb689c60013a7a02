"""Plain torch: the hand-written backward passes gradcheck, matches autograd of x*sigmoid(x),
and the MLP trains."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

x = torch.randn(64, dtype=torch.double, requires_grad=True) * 4
x = x.detach().requires_grad_(True)
assert torch.autograd.gradcheck(train.SwishFn.apply, (x,)), "gradcheck failed"
ref = torch.autograd.grad((x * torch.sigmoid(x)).sum(), x)[0]
mine = torch.autograd.grad(train.SwishFn.apply(x).sum(), x)[0]
print(f"gradcheck passed; max |custom - autograd| = {(ref - mine).abs().max().item():.1e}")

torch.manual_seed(0)
losses, model = train.main(verbose=False)
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"loss: first 10 steps {first:.3f}, last 10 steps {last:.3f}")
assert last < 0.5 * first, (first, last)
print("PASS")
