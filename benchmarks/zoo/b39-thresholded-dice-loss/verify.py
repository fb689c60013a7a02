"""Dice on (sigmoid > 0.5) has no gradient; loss.requires_grad = True silences the error, so backward() reaches no parameter. Fix: soft Dice on the probabilities."""
import contextlib
import io
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()


def patch(src, old, new):
    """Replace one exact snippet of train.py (fails loudly if the script changed)."""
    assert src.count(old) == 1, f"snippet not found exactly once: {old!r}"
    return src.replace(old, new)


def run(src):
    """Execute a (possibly patched) train.py as __main__, quietly; return its globals.
    `_initial` maps id(param) -> the value the parameter had at its module's first forward."""
    initial = {}

    def snapshot(module, args):
        for p in module.parameters():
            if id(p) not in initial:
                initial[id(p)] = p.detach().clone()

    handle = torch.nn.modules.module.register_module_forward_pre_hook(snapshot)
    ns = {"__name__": "__main__", "__file__": str(HERE / "train.py")}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(src, str(HERE / "train.py"), "exec"), ns)
    finally:
        handle.remove()
    ns["_initial"] = initial
    return ns


def change(ns, params):
    """Largest absolute change of any element of `params` since their first forward."""
    return max((p.detach().float() - ns["_initial"][id(p)].float()).abs().max().item() for p in params)


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs)


def verdict(symptom, fixed, details):
    for line in details:
        print(line)
    print(f"symptom reproduced: {symptom}")
    print(f"fix removes it:     {fixed}")
    ok = bool(symptom and fixed)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)

bug = run(SRC)
fix_src = patch(SRC, "    pred = (torch.sigmoid(logits) > 0.5).float()\n", "    pred = torch.sigmoid(logits)\n")
fix = run(patch(fix_src, "        loss.requires_grad = True\n", ""))


def hard_dice(ns):
    images, masks = ns["make_cells"](200, seed=5)
    with torch.no_grad():
        pred = (torch.sigmoid(ns["model"](images)) > 0.5).float()
    inter = (pred * masks).sum((1, 2, 3))
    return (2 * inter / (pred.sum((1, 2, 3)) + masks.sum((1, 2, 3))).clamp_min(1)).mean().item()


bug_change = change(bug, bug["model"].parameters())
fix_change = change(fix, fix["model"].parameters())
bug_dice, fix_dice = hard_dice(bug), hard_dice(fix)
verdict(bug_change == 0.0 and all(p.grad is None for p in bug["model"].parameters()),
        fix_change > 1e-3 and fix_dice > bug_dice + 0.2,
        [f"max |dw| after 80 steps: bug {bug_change:.3g}, fix {fix_change:.3g}",
         f"held-out Dice of the thresholded masks: bug {bug_dice:.3f}, fix {fix_dice:.3f}"])
