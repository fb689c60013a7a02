"""A NumPy moving average on detached conv features cuts the Conv1d off the graph. Fix: smooth in torch."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import change, mean, patch, run, verdict  # noqa: E402


import torch.nn.functional as F

bug = run(SRC)
fix = run(patch(SRC, "torch.from_numpy(moving_average(feats.detach().numpy()))",
                "F.avg_pool1d(feats, 5, stride=1, padding=2, count_include_pad=True)"))

# the torch version computes the same smoothing as np.convolve(..., mode="same") with a 1/5 kernel
x = torch.randn(2, 3, 40)
same = torch.allclose(torch.from_numpy(bug["moving_average"](x.numpy())),
                      F.avg_pool1d(x, 5, stride=1, padding=2, count_include_pad=True), atol=1e-6)

bug_conv = change(bug, bug["model"].conv.parameters())
fix_conv = change(fix, fix["model"].conv.parameters())
bug_tail, fix_tail = mean(bug["history"][-30:]), mean(fix["history"][-30:])
verdict(bug_conv == 0.0 and bug["model"].conv.weight.grad is None,
        same and fix_conv > 1e-3 and fix_tail < bug_tail,
        [f"torch smoothing == numpy smoothing: {same}",
         f"conv max |dw| after 120 steps: bug {bug_conv:.3g}, fix {fix_conv:.3g}",
         f"mean mse of the last 30 steps: bug {bug_tail:.4f}, fix {fix_tail:.4f}"])
