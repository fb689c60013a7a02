"""Attention over the batch: a window's prediction depends on the other windows it is
batched with, so the accuracy measured in one batch is not the accuracy one window at a
time. Fix: nn.MultiheadAttention(dim, 4, batch_first=True)."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402

bug = run(SRC)
fix = run(patch(SRC, "nn.MultiheadAttention(dim, 4)", "nn.MultiheadAttention(dim, 4, batch_first=True)"))


def batch_dependence(ns):
    """Largest change of window 0's logits when the rest of its batch changes."""
    model, x = ns["model"], ns["x_test"]
    with torch.no_grad():
        return (model(x[:32])[0] - model(torch.cat([x[:1], x[100:131]]))[0]).abs().max().item()


verdict(batch_dependence(bug) > 1e-3 and abs(bug["batched"] - bug["single"]) > 0.02,
        batch_dependence(fix) < 1e-5 and abs(fix["batched"] - fix["single"]) <= 0.005,
        [f"window 0's logits change by {batch_dependence(bug):.3g} with its batch (fix: {batch_dependence(fix):.2g})",
         f"accuracy batched / one at a time: bug {bug['batched']:.3f} / {bug['single']:.3f}, "
         f"fix {fix['batched']:.3f} / {fix['single']:.3f}"])
