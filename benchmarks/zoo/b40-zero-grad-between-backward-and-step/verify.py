"""zero_grad() between backward() and step(): every step sees None gradients, so no embedding ever moves and the RMSE stays at its initial value. Fix: zero_grad before backward (or after step)."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import change, mean, patch, run, verdict  # noqa: E402


bug = run(SRC)
fix = run(patch(SRC, "            loss.backward()\n            optimizer.zero_grad()\n            optimizer.step()\n",
                "            optimizer.zero_grad()\n            loss.backward()\n            optimizer.step()\n"))


def val_rmse(ns):
    users, items, ratings = ns["make_ratings"]()
    with torch.no_grad():
        return (ns["model"](users[16000:], items[16000:]) - ratings[16000:]).pow(2).mean().sqrt().item()


bug_change = change(bug, bug["model"].parameters())
fix_change = change(fix, fix["model"].parameters())
bug_rmse, fix_rmse = val_rmse(bug), val_rmse(fix)
b, f = bug["history"], fix["history"]
verdict(bug_change == 0.0 and abs(mean(b[:62]) - mean(b[-62:])) < 0.02,
        fix_change > 1e-3 and mean(f[-62:]) < 0.6 * mean(f[:62]) and fix_rmse < bug_rmse - 0.05,
        [f"max |dw| after 5 epochs: bug {bug_change:.3g}, fix {fix_change:.3g}",
         f"train MSE, first -> last epoch: bug {mean(b[:62]):.3f} -> {mean(b[-62:]):.3f}, "
         f"fix {mean(f[:62]):.3f} -> {mean(f[-62:]):.3f}",
         f"validation RMSE: bug {bug_rmse:.3f}, fix {fix_rmse:.3f}"])
