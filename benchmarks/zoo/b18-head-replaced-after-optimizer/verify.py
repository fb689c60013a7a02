"""model.fc is replaced after the optimizer was built, so the new head is in no param group and never trains. Fix: replace it first."""
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
fix = run(patch(SRC,
                "    optimizer = build_optimizer(model)\n    if num_classes != model.fc.out_features:\n"
                "        model.fc = nn.Linear(model.fc.in_features, num_classes)\n",
                "    if num_classes != model.fc.out_features:\n"
                "        model.fc = nn.Linear(model.fc.in_features, num_classes)\n    optimizer = build_optimizer(model)\n"))

bug_fc = change(bug, bug["model"].fc.parameters())
fix_fc = change(fix, fix["model"].fc.parameters())
bug_tail, fix_tail = mean(bug["history"][-20:]), mean(fix["history"][-20:])
verdict(bug_fc == 0.0 and bug["model"].fc.weight.grad is not None,
        fix_fc > 1e-3 and fix_tail < bug_tail,
        [f"fc max |dw| after 100 steps: bug {bug_fc:.3g} (it does get a gradient), fix {fix_fc:.3g}",
         f"mean loss of the last 20 steps: bug {bug_tail:.4f}, fix {fix_tail:.4f}"])
