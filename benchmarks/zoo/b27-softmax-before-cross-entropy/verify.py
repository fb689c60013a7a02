"""nn.Softmax before nn.CrossEntropyLoss: the loss cannot go below -log(e/(e+9)) = 1.461 and learning stalls. Fix: feed logits."""
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

short = patch(SRC, "for epoch in range(3)", "for epoch in range(2)")
bug = run(short)
fix = run(patch(short, "    nn.Linear(64, NUM_CLASSES),\n    nn.Softmax(dim=1),\n", "    nn.Linear(64, NUM_CLASSES),\n"))
floor = -math.log(math.e / (math.e + 9))


def accuracy(ns):
    with torch.no_grad():
        return (ns["model"](ns["test_x"]).argmax(1) == ns["test_y"]).float().mean().item()


bug_acc, fix_acc = accuracy(bug), accuracy(fix)
verdict(min(bug["history"]) >= floor - 1e-4 and mean(bug["history"][-10:]) > 1.5,
        mean(fix["history"][-10:]) < 0.8 and fix_acc > bug_acc,
        [f"lowest possible loss with softmax->cross_entropy (10 classes): {floor:.4f}",
         f"lowest training loss seen: bug {min(bug['history']):.4f}, fix {min(fix['history']):.4f}",
         f"mean loss of the last 10 steps: bug {mean(bug['history'][-10:]):.4f}, fix {mean(fix['history'][-10:]):.4f}",
         f"test accuracy after 2 epochs: bug {bug_acc:.3f}, fix {fix_acc:.3f}"])
