"""Raw sensor columns (300 K, 1500 rpm, ...) drive fc1's tanh units into saturation; the model predicts the majority class. Fix: standardise the columns."""
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
fix = run(patch(SRC, "    x_train, y_train, x_test, y_test = x[:4000], y[:4000], x[4000:], y[4000:]\n",
                "    x = (x - x[:4000].mean(0)) / x[:4000].std(0)\n"
                "    x_train, y_train, x_test, y_test = x[:4000], y[:4000], x[4000:], y[4000:]\n"))


def measure(ns, standardise):
    x, y = ns["read_machine_log"]()
    if standardise:
        x = (x - x[:4000].mean(0)) / x[:4000].std(0)
    model = ns["model"]
    with torch.no_grad():
        flat = (1 - torch.tanh(model.fc1(x)) ** 2 < 1e-2).float().mean().item()
        acc = ((model(x[4000:]) > 0).float() == y[4000:]).float().mean().item()
    return flat, acc, max(y[4000:].mean().item(), 1 - y[4000:].mean().item())


bug_flat, bug_acc, majority = measure(bug, False)
fix_flat, fix_acc, _ = measure(fix, True)
verdict(bug_flat > 0.9 and bug_acc <= majority + 0.01,
        fix_flat < 0.2 and fix_acc > majority + 0.1,
        [f"share of fc1 tanh unit-samples with tanh' < 0.01: bug {bug_flat:.1%}, fix {fix_flat:.1%}",
         f"test accuracy: bug {bug_acc:.3f}, fix {fix_acc:.3f} (majority class {majority:.3f})"])
