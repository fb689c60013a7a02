"""Softmax probabilities [N,6] against class indices [N,1] with MSELoss: the target broadcasts, every probability is pulled toward the grade number, and accuracy stays at chance. Fix: CrossEntropyLoss on logits."""
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
import warnings

short = patch(SRC, "for epoch in range(8)", "for epoch in range(4)")
fix_src = patch(short, "    nn.Linear(64, N_CLASSES),\n    nn.Softmax(dim=1),\n", "    nn.Linear(64, N_CLASSES),\n")
fix_src = patch(fix_src, "loss_fn = nn.MSELoss()", "loss_fn = lambda out, y: nn.functional.cross_entropy(out, y.squeeze(1).long())")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    bug = run(short)
fix = run(fix_src)


def accuracy(ns):
    with torch.no_grad():
        return (ns["model"](ns["x_test"]).argmax(1) == ns["y_test"].squeeze(1).long()).float().mean().item()


out = bug["model"](bug["x_test"][:4])
bug_acc, fix_acc = accuracy(bug), accuracy(fix)
majority = torch.bincount(bug["y_test"].squeeze(1).long()).max().item() / len(bug["y_test"])
verdict(tuple(out.shape) != tuple(bug["y_test"][:4].shape) and bug_acc < majority + 0.05,
        fix_acc > bug_acc + 0.3,
        [f"prediction shape {tuple(out.shape)} vs target shape {tuple(bug['y_test'][:4].shape)}; "
         f"broadcast warnings: {sum('target size' in str(w.message) for w in caught)}",
         f"test accuracy after 4 epochs: bug {bug_acc:.3f} (majority class {majority:.3f}), fix {fix_acc:.3f}"])
