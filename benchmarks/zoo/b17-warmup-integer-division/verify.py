"""step // WARMUP_STEPS is 0 for every warmup step, so the LR is 0 and AdamW changes nothing. Fix: true division."""
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

# only the warmup phase matters: run the first 100 steps
short = patch(SRC, "TOTAL_STEPS = 160", "TOTAL_STEPS = 100")
bug = run(short)
fix = run(patch(short, "return min(1.0, step // WARMUP_STEPS)", "return min(1.0, (step + 1) / WARMUP_STEPS)"))

bug_change = change(bug, bug["model"].parameters())
fix_change = change(fix, fix["model"].parameters())
b, f = bug["history"], fix["history"]
bug_drop = (mean(b[:10]) - mean(b[-10:])) / mean(b[:10])
fix_drop = (mean(f[:10]) - mean(f[-10:])) / mean(f[:10])
verdict(bug_change == 0.0 and abs(bug_drop) < 0.02,
        fix_change > 1e-3 and fix_drop > 0.1,
        [f"max |dw| over the 100 warmup steps: bug {bug_change:.3g}, fix {fix_change:.3g}",
         f"loss drop first 10 -> last 10 steps: bug {bug_drop:.1%}, fix {fix_drop:.1%}"])
