"""Dice on (sigmoid > 0.5) has no gradient; loss.requires_grad = True silences the error, so backward() reaches no parameter. Fix: soft Dice on the probabilities."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import change, patch, run, verdict  # noqa: E402


bug = run(SRC)
fix_src = patch(SRC, "    pred = (torch.sigmoid(logits) > 0.5).float()\n", "    pred = torch.sigmoid(logits)\n")
fix = run(patch(fix_src, "        loss.requires_grad = True\n", ""))


def hard_dice(ns):
    images, masks = ns["make_cells"](200, seed=5)
    with torch.no_grad():
        pred = (torch.sigmoid(ns["model"](images)) > 0.5).float()
    inter = (pred * masks).sum((1, 2, 3))
    return (2 * inter / (pred.sum((1, 2, 3)) + masks.sum((1, 2, 3))).clamp_min(1)).mean().item()


bug_change = change(bug, bug["model"].parameters())
fix_change = change(fix, fix["model"].parameters())
bug_dice, fix_dice = hard_dice(bug), hard_dice(fix)
verdict(bug_change == 0.0 and all(p.grad is None for p in bug["model"].parameters()),
        fix_change > 1e-3 and fix_dice > bug_dice + 0.2,
        [f"max |dw| after 80 steps: bug {bug_change:.3g}, fix {fix_change:.3g}",
         f"held-out Dice of the thresholded masks: bug {bug_dice:.3f}, fix {fix_dice:.3f}"])
