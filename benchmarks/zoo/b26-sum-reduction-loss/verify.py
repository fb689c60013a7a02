"""MSELoss(reduction='sum') over 256x2 outputs makes the gradient 512x the mean-loss gradient the lr was picked for: the loss explodes. Fix: mean reduction."""
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
