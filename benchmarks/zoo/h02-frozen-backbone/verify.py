"""Plain torch: the head learns, and the frozen backbone (weights and BN statistics) does not move."""
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.manual_seed(0)
before = copy.deepcopy(train.load_pretrained(train.make_backbone()).state_dict())
losses, model = train.main(verbose=False)
after = model.backbone.state_dict()
moved = max((before[k].float() - after[k].float()).abs().max().item() for k in before)
print(f"largest change of a backbone tensor: {moved:.2e}")
assert moved == 0.0
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"loss: first 10 steps {first:.3f}, last 10 steps {last:.3f}")
assert last < 0.6 * first, (first, last)
print("PASS")
