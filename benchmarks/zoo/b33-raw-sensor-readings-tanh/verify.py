"""Raw sensor columns (300 K, 1500 rpm, ...) drive fc1's tanh units into saturation; the model predicts the majority class. Fix: standardise the columns."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


bug = run(SRC)
fix = run(patch(SRC, "    x_train, y_train, x_test, y_test = x[:4000], y[:4000], x[4000:], y[4000:]\n",
                "    x = (x - x[:4000].mean(0)) / x[:4000].std(0)\n"
                "    x_train, y_train, x_test, y_test = x[:4000], y[:4000], x[4000:], y[4000:]\n"))


def measure(ns, standardise):
    x, y = ns["read_machine_log"]()
    if standardise:
        x = (x - x[:4000].mean(0)) / x[:4000].std(0)
    model = ns["model"]
    with torch.no_grad():
        flat = (1 - torch.tanh(model.fc1(x)) ** 2 < 1e-2).float().mean().item()
        acc = ((model(x[4000:]) > 0).float() == y[4000:]).float().mean().item()
    return flat, acc, max(y[4000:].mean().item(), 1 - y[4000:].mean().item())


bug_flat, bug_acc, majority = measure(bug, False)
fix_flat, fix_acc, _ = measure(fix, True)
verdict(bug_flat > 0.9 and bug_acc <= majority + 0.01,
        fix_flat < 0.2 and fix_acc > majority + 0.1,
        [f"share of fc1 tanh unit-samples with tanh' < 0.01: bug {bug_flat:.1%}, fix {fix_flat:.1%}",
         f"test accuracy: bug {bug_acc:.3f}, fix {fix_acc:.3f} (majority class {majority:.3f})"])
