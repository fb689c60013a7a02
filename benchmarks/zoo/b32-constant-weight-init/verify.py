"""nn.init.constant_ gives every unit of a layer the same weights: the units stay copies of each other through training and the CNN stays near chance. Fix: a random (Kaiming) init."""
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
fix = run(patch(SRC, "nn.init.constant_(m.weight, 0.05)", "nn.init.kaiming_normal_(m.weight, nonlinearity=\"relu\")"))


def distinct_filters(model):
    w = model.features[3].weight.detach().flatten(1)        # second conv: 32 filters
    return (w - w[:1]).abs().max().item()


def accuracy(ns):
    signals, labels = ns["make_heartbeats"](1200, seed=1)
    with torch.no_grad():
        return (ns["model"](signals).argmax(1) == labels).float().mean().item()


bug_spread, fix_spread = distinct_filters(bug["model"]), distinct_filters(fix["model"])
bug_acc, fix_acc = accuracy(bug), accuracy(fix)
verdict(bug_spread < 1e-6 and bug_acc < 0.45,
        fix_spread > 1e-2 and fix_acc > bug_acc + 0.3,
        [f"after 150 steps, largest difference between the 32 filters of features.3: bug {bug_spread:.2g}, "
         f"fix {fix_spread:.3g}",
         f"train accuracy (3 classes): bug {bug_acc:.3f}, fix {fix_acc:.3f}"])
