"""MSELoss(reduction='sum') over 256x2 outputs makes the gradient 512x the mean-loss gradient the lr was picked for: the loss explodes. Fix: mean reduction."""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import mean, patch, run, verdict  # noqa: E402


import math

short = patch(SRC, "for epoch in range(6)", "for epoch in range(2)")
bug = run(short)
fix = run(patch(short, 'nn.MSELoss(reduction="sum")', "nn.MSELoss()"))
b, f = bug["history"], fix["history"]
bug_rise = mean(b[17:20]) / mean(b[:3])
fix_drop = mean(f[-3:]) / mean(f[:3])
verdict(bug_rise > 100,
        all(math.isfinite(v) for v in f) and fix_drop < 0.8,
        [f"bug: mean loss of steps 18-20 / steps 1-3 = {bug_rise:.3g}x (per element: {mean(b[17:20]) / 512:.3g})",
         f"fix: last 3 / first 3 steps = {fix_drop:.3f}x"])
