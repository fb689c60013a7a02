"""optimizer.step without parentheses never updates anything: parameters stay at their init, the loss stays at ln 2. Fix: optimizer.step()."""
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
fix = run(patch(SRC, "            optimizer.step\n", "            optimizer.step()\n"))
bug_change = change(bug, bug["model"].parameters())
fix_change = change(fix, fix["model"].parameters())
bug_tail, fix_tail = mean(bug["history"][-32:]), mean(fix["history"][-32:])
verdict(bug_change == 0.0 and abs(bug_tail - 0.6931) < 0.02,
        fix_change > 1e-3 and fix_tail < 0.4,
        [f"max |dw| after 3 epochs: bug {bug_change:.3g}, fix {fix_change:.3g}",
         f"mean loss of the last epoch: bug {bug_tail:.4f} (ln 2 = 0.6931), fix {fix_tail:.4f}"])
