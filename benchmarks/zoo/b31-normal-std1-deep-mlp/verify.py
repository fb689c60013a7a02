"""N(0, 1) weights in an 8-layer ReLU MLP at fan-in 64 multiply the signal by ~sqrt(64/2)=5.7 per layer: the first loss is ~1e7 and training goes NaN. Fix: Kaiming init."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import mean, patch, run, verdict  # noqa: E402


import math

short = patch(SRC, "range(200)", "range(60)")
bug = run(short)
fix = run(patch(short, "nn.init.normal_(layer.weight, mean=0.0, std=1.0)",
                "nn.init.kaiming_normal_(layer.weight, nonlinearity=\"relu\")"))


def layer_rms(ns):
    torch.manual_seed(0)
    model = ns["ActivityNet"]()
    x, _ = ns["make_activity_data"]()
    rms, h = [], x[:256]
    with torch.no_grad():
        for layer in model.hidden:
            h = torch.relu(layer(h))
            rms.append(h.pow(2).mean().sqrt().item())
    return rms


bug_rms, fix_rms = layer_rms(bug), layer_rms(fix)
bug_nan = next((i for i, v in enumerate(bug["history"]) if not math.isfinite(v)), None)
verdict(bug_rms[-1] / bug_rms[0] > 1e4 and bug["history"][0] > 1e4 and bug_nan is not None,
        all(math.isfinite(v) for v in fix["history"]) and fix_rms[-1] / fix_rms[0] < 10
        and mean(fix["history"][-10:]) < 0.5,
        [f"activation RMS after hidden layer 1 -> 8 at init: bug {bug_rms[0]:.3g} -> {bug_rms[-1]:.3g}, "
         f"fix {fix_rms[0]:.3g} -> {fix_rms[-1]:.3g}",
         f"bug: first loss {bug['history'][0]:.3g}, first non-finite loss at step {bug_nan}",
         f"fix: first loss {fix['history'][0]:.3g}, mean of the last 10 of 60 steps {mean(fix['history'][-10:]):.3f}"])
