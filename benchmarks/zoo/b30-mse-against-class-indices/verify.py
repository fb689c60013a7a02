"""Softmax probabilities [N,6] against class indices [N,1] with MSELoss: the target broadcasts, every probability is pulled toward the grade number, and accuracy stays at chance. Fix: CrossEntropyLoss on logits."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


import warnings

short = patch(SRC, "for epoch in range(8)", "for epoch in range(4)")
fix_src = patch(short, "    nn.Linear(64, N_CLASSES),\n    nn.Softmax(dim=1),\n", "    nn.Linear(64, N_CLASSES),\n")
fix_src = patch(fix_src, "loss_fn = nn.MSELoss()", "loss_fn = lambda out, y: nn.functional.cross_entropy(out, y.squeeze(1).long())")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    bug = run(short)
fix = run(fix_src)


def accuracy(ns):
    with torch.no_grad():
        return (ns["model"](ns["x_test"]).argmax(1) == ns["y_test"].squeeze(1).long()).float().mean().item()


out = bug["model"](bug["x_test"][:4])
bug_acc, fix_acc = accuracy(bug), accuracy(fix)
majority = torch.bincount(bug["y_test"].squeeze(1).long()).max().item() / len(bug["y_test"])
verdict(tuple(out.shape) != tuple(bug["y_test"][:4].shape) and bug_acc < majority + 0.05,
        fix_acc > bug_acc + 0.3,
        [f"prediction shape {tuple(out.shape)} vs target shape {tuple(bug['y_test'][:4].shape)}; "
         f"broadcast warnings: {sum('target size' in str(w.message) for w in caught)}",
         f"test accuracy after 4 epochs: bug {bug_acc:.3f} (majority class {majority:.3f}), fix {fix_acc:.3f}"])
