"""Plain torch: the schedule warms up then decays, and the regressor trains."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

factors = [train.warmup_cosine(s) for s in range(train.STEPS)]
assert factors[0] == 1 / train.WARMUP and abs(factors[train.WARMUP] - 1.0) < 1e-9
assert factors[-1] < 0.15 and all(a <= b for a, b in zip(factors[:train.WARMUP], factors[1:train.WARMUP + 1]))
print(f"lr factor: step 0 {factors[0]:.2f}, step {train.WARMUP} {factors[train.WARMUP]:.2f}, last {factors[-1]:.2f}")

torch.manual_seed(0)
losses, model = train.main(verbose=False)
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"loss: first 10 steps {first:.3f}, last 10 steps {last:.3f}")
assert last < 0.3 * first, (first, last)
print("PASS")
