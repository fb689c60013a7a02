"""Raw features (area ~1e3, year ~2e3) make the MSE curvature ~1e6-1e7, far past the SGD stability limit 2/h for lr=1e-4: the loss overflows. Fix: standardise the features."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


import math

bug = run(SRC)
x, _ = bug["load_listings"]()
h_max = torch.linalg.eigvalsh(2 * x.T.double() @ x.double() / len(x)).max().item()   # Hessian of the MSE
fix_src = patch(SRC, "    x, y = load_listings()\n",
                "    x, y = load_listings()\n    x = (x - x.mean(0)) / x.std(0)\n")
fix = run(patch(fix_src, "lr=1e-4)", "lr=1e-2)"))
first_bad = next((i for i, v in enumerate(bug["history"]) if not math.isfinite(v)), None)
verdict(first_bad is not None and first_bad < 20 and 1e-4 > 2 / h_max,
        all(math.isfinite(v) for v in fix["history"]) and fix["history"][-1] < 200,
        [f"largest curvature of the loss (raw features): {h_max:.3g}; stability limit 2/h = {2 / h_max:.2g} < lr 1e-4",
         f"bug: first non-finite loss at step {first_bad}",
         f"fix: final MSE {fix['history'][-1]:.1f} (noise variance 100)"])
