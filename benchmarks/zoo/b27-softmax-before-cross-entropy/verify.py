"""nn.Softmax before nn.CrossEntropyLoss: the loss cannot go below -log(e/(e+9)) = 1.461 and learning stalls. Fix: feed logits."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import mean, patch, run, verdict  # noqa: E402


import math

short = patch(SRC, "for epoch in range(3)", "for epoch in range(2)")
bug = run(short)
fix = run(patch(short, "    nn.Linear(64, NUM_CLASSES),\n    nn.Softmax(dim=1),\n", "    nn.Linear(64, NUM_CLASSES),\n"))
floor = -math.log(math.e / (math.e + 9))


def accuracy(ns):
    with torch.no_grad():
        return (ns["model"](ns["test_x"]).argmax(1) == ns["test_y"]).float().mean().item()


bug_acc, fix_acc = accuracy(bug), accuracy(fix)
verdict(min(bug["history"]) >= floor - 1e-4 and mean(bug["history"][-10:]) > 1.5,
        mean(fix["history"][-10:]) < 0.8 and fix_acc > bug_acc,
        [f"lowest possible loss with softmax->cross_entropy (10 classes): {floor:.4f}",
         f"lowest training loss seen: bug {min(bug['history']):.4f}, fix {min(fix['history']):.4f}",
         f"mean loss of the last 10 steps: bug {mean(bug['history'][-10:]):.4f}, fix {mean(fix['history'][-10:]):.4f}",
         f"test accuracy after 2 epochs: bug {bug_acc:.3f}, fix {fix_acc:.3f}"])
