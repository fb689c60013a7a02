"""uint8 pixels (~170) fed as floats: conv1's tanh is saturated for every pixel and LeNet-5 stays at chance. Fix: standardise the pixels."""
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
fix = run(patch(SRC, "            x = images[idx].float()\n", "            x = (images[idx].float() - 170.0) / 20.0\n"))


def measure(ns, standardise):
    images, labels = ns["scan_fabric"](2000, seed=1)
    x = images[:500].float()
    if standardise:
        x = (x - 170.0) / 20.0
    with torch.no_grad():
        return (1 - torch.tanh(ns["model"].conv1(x)) ** 2 < 1e-2).float().mean().item()


bug_flat, fix_flat = measure(bug, False), measure(fix, True)
bug_tail, fix_tail = mean(bug["history"][-20:]), mean(fix["history"][-20:])
verdict(bug_flat > 0.9 and bug_tail > 1.35,
        fix_flat < 0.5 and fix_tail < bug_tail - 0.2,
        [f"share of conv1 tanh outputs with tanh' < 0.01: bug {bug_flat:.1%}, fix {fix_flat:.1%}",
         f"mean loss of the last 20 steps (chance = ln 4 = 1.386): bug {bug_tail:.3f}, fix {fix_tail:.3f}"])
