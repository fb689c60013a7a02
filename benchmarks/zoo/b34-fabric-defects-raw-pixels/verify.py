"""uint8 pixels (~170) fed as floats: conv1's tanh is saturated for every pixel and LeNet-5 stays at chance. Fix: standardise the pixels."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import mean, patch, run, verdict  # noqa: E402


bug = run(SRC)
fix = run(patch(SRC, "            x = images[idx].float()\n", "            x = (images[idx].float() - 170.0) / 20.0\n"))


def measure(ns, standardise):
    images, labels = ns["scan_fabric"](2000, seed=1)
    x = images[:500].float()
    if standardise:
        x = (x - 170.0) / 20.0
    with torch.no_grad():
        return (1 - torch.tanh(ns["model"].conv1(x)) ** 2 < 1e-2).float().mean().item()


bug_flat, fix_flat = measure(bug, False), measure(fix, True)
bug_tail, fix_tail = mean(bug["history"][-20:]), mean(fix["history"][-20:])
verdict(bug_flat > 0.9 and bug_tail > 1.35,
        fix_flat < 0.5 and fix_tail < bug_tail - 0.2,
        [f"share of conv1 tanh outputs with tanh' < 0.01: bug {bug_flat:.1%}, fix {fix_flat:.1%}",
         f"mean loss of the last 20 steps (chance = ln 4 = 1.386): bug {bug_tail:.3f}, fix {fix_tail:.3f}"])
