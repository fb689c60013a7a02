"""Plain torch: the Transformer learns to copy, and its attention becomes sharply peaked."""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.manual_seed(0)
losses, model = train.main(verbose=False)
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"loss: first 10 steps {first:.3f}, last 10 steps {last:.4f}")
assert last < 0.1 * first, (first, last)

inputs, targets = train.make_batch(256, torch.Generator().manual_seed(7))
captured = {}
hooks = [blk.attn.register_forward_hook(lambda m, inp, out, i=i: captured.__setitem__(i, inp[0]))
         for i, blk in enumerate(model.blocks)]
with torch.no_grad():
    logits = model(inputs)
for h in hooks:
    h.remove()
peaks = []
with torch.no_grad():
    for i, blk in enumerate(model.blocks):
        x, attn = captured[i], blk.attn
        b, t, _ = x.shape
        q, k, _ = attn.qkv(x).split(train.D, dim=2)
        hd = train.D // train.HEADS
        q = q.view(b, t, train.HEADS, hd).transpose(1, 2)
        k = k.view(b, t, train.HEADS, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / (math.sqrt(hd) * train.TAU)
        att = F.softmax(att.masked_fill(attn.mask[:t, :t], float("-inf")), dim=-1)
        peaks.append(att[:, :, train.L:, :].max(dim=-1).values.mean(dim=(0, 2)))  # per head, copy half
peak = torch.stack(peaks)
mask = targets != -100
acc = (logits.argmax(-1)[mask] == targets[mask]).float().mean().item()
print(f"copy accuracy {acc:.1%}; mean max attention weight per head on the copy half: "
      + "; ".join(f"layer {i}: " + ", ".join(f"{p:.2f}" for p in row) for i, row in enumerate(peak.tolist())))
assert acc > 0.99 and peak.max() > 0.8
print("PASS")
