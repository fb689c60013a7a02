"""Raw features (area ~1e3, year ~2e3) make the MSE curvature ~1e6-1e7, far past the SGD stability limit 2/h for lr=1e-4: the loss overflows. Fix: standardise the features."""
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
