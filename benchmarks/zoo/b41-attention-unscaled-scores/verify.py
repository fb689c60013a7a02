"""Unscaled attention scores (std ~ sqrt(d_head)) make most softmax rows one-hot at init, so
the query/key projections get ~no gradient. Fix: divide the scores by sqrt(d_head)."""
import pathlib
import sys

import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402

bug = run(SRC)
fix = run(patch(SRC, "        scores = q @ k.transpose(-2, -1)\n",
                "        scores = q @ k.transpose(-2, -1) / D ** 0.5\n"))


def at_init(ns):
    """On a fresh model's first batch: the share of one-hot softmax rows, and the gradient norm
    the scores of the query the loss reads (the last token's row) get, recomputed by hand."""
    torch.manual_seed(0)
    model = ns["Pointer"]()
    tokens, target = ns["make_batch"](64, torch.Generator().manual_seed(1))
    attn = model.attn
    x = model.tok(tokens) + model.pos(torch.arange(tokens.shape[1]))
    scores = attn.q(x) @ attn.k(x).transpose(-2, -1)
    if ns is fix:
        scores = scores / ns["D"] ** 0.5
    scores.retain_grad()
    weights = scores.softmax(-1)
    h = x + weights @ attn.v(x)
    F.cross_entropy(model.out(h[:, -1]), target).backward()
    one_hot = (weights.amax(-1) > 0.99).float().mean().item()
    return one_hot, scores.grad[:, -1].norm().item()


def accuracy(ns):
    return ns["accuracy"](ns["model"], torch.Generator().manual_seed(7), batches=16)


(bug_rows, bug_grad), (fix_rows, fix_grad) = at_init(bug), at_init(fix)
bug_acc, fix_acc = accuracy(bug), accuracy(fix)
verdict(bug_rows > 0.5 and bug_grad < fix_grad and bug_acc < 1 / 7 + 0.02,   # one-hot rows, learns nothing
        fix_rows < 0.05 and fix_acc > bug_acc + 0.03,
        [f"softmax rows with max > 0.99 at init: bug {bug_rows:.0%}, fix {fix_rows:.0%}",
         f"||dL/d scores|| of the query the loss reads, at init: bug {bug_grad:.3g}, fix {fix_grad:.3g}",
         f"held-out accuracy after {bug['STEPS']} steps (chance 1/7): bug {bug_acc:.3f}, fix {fix_acc:.3f}"])
