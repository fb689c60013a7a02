"""A Sigmoid output cannot exceed 1 while prices are ~260 (thousands): the MSE cannot go down. Fix: linear output on a standardised target."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import mean, patch, run, verdict  # noqa: E402


bug = run(SRC)
fix_src = patch(SRC, "nn.Linear(32, 1), nn.Sigmoid(),", "nn.Linear(32, 1),")
fix = run(patch(fix_src, "    x, y = make_housing()\n",
                "    x, y = make_housing()\n    y = (y - 260.0) / 50.0\n"))


def evaluate(ns, scale=1.0, shift=0.0):
    x, y = ns["make_housing"]()
    with torch.no_grad():
        pred = ns["model"](x[1600:]) * scale + shift
    return pred.max().item(), ((pred - y[1600:]) ** 2).mean().sqrt().item()


bug_max, bug_rmse = evaluate(bug)
fix_max, fix_rmse = evaluate(fix, 50.0, 260.0)
b = bug["history"]
bug_drop = (mean(b[:10]) - mean(b[-10:])) / mean(b[:10])
verdict(bug_max <= 1.0 and abs(bug_drop) < 0.05 and bug_rmse > 200,
        fix_rmse < 0.25 * bug_rmse,
        [f"largest test prediction: bug {bug_max:.3f} (targets ~260), fix {fix_max:.1f}",
         f"training MSE change first 10 -> last 10 of {len(b)} steps: bug {bug_drop:.1%}",
         f"test RMSE after 5 epochs: bug {bug_rmse:.1f}, fix {fix_rmse:.1f}"])
