"""nn.init.constant_ gives every unit of a layer the same weights: the units stay copies of each other through training and the CNN stays near chance. Fix: a random (Kaiming) init."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


bug = run(SRC)
fix = run(patch(SRC, "nn.init.constant_(m.weight, 0.05)", "nn.init.kaiming_normal_(m.weight, nonlinearity=\"relu\")"))


def distinct_filters(model):
    w = model.features[3].weight.detach().flatten(1)        # second conv: 32 filters
    return (w - w[:1]).abs().max().item()


def accuracy(ns):
    signals, labels = ns["make_heartbeats"](1200, seed=1)
    with torch.no_grad():
        return (ns["model"](signals).argmax(1) == labels).float().mean().item()


bug_spread, fix_spread = distinct_filters(bug["model"]), distinct_filters(fix["model"])
bug_acc, fix_acc = accuracy(bug), accuracy(fix)
verdict(bug_spread < 1e-6 and bug_acc < 0.45,
        fix_spread > 1e-2 and fix_acc > bug_acc + 0.3,
        [f"after 150 steps, largest difference between the 32 filters of features.3: bug {bug_spread:.2g}, "
         f"fix {fix_spread:.3g}",
         f"train accuracy (3 classes): bug {bug_acc:.3f}, fix {fix_acc:.3f}"])
