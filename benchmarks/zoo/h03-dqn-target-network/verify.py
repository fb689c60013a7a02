"""Plain torch: the online network's Q-values approach the exact Q* (value iteration)."""
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

q_star = train.optimal_q()
keep = torch.arange(train.STATES) != train.GOAL
s = train.encode(list(range(train.STATES)))

torch.manual_seed(0)
random.seed(0)
with torch.no_grad():
    q0 = train.QNet()(s)
err0 = (q0 - q_star)[keep].abs().mean().item()

torch.manual_seed(0)
random.seed(0)
losses, online = train.main(verbose=False)
with torch.no_grad():
    q1 = online(s)
err1 = (q1 - q_star)[keep].abs().mean().item()
picked = q_star[keep].gather(1, q1[keep].argmax(1, keepdim=True)).squeeze(1)
greedy_ok = (picked >= q_star[keep].max(1).values - 1e-6).float().mean().item()
print(f"mean |Q - Q*|: before {err0:.3f}, after {err1:.3f}; greedy action optimal in {greedy_ok:.0%} of states")
assert err1 < 0.5 * err0, (err0, err1)
print("PASS")
