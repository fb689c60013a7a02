"""A NumPy moving average on detached conv features cuts the Conv1d off the graph. Fix: smooth in torch."""
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
