"""torch.sigmoid output fed to BCEWithLogitsLoss: a second sigmoid squeezes predictions into [0.5, 0.731] and F1 collapses. Fix: return logits."""
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
fix = run(patch(SRC, "return torch.sigmoid(self.out(x))", "return self.out(x)"))


def evaluate(ns, logits_model):
    x, y = ns["make_tagging_data"](4000)
    model = ns["model"].eval()
    with torch.no_grad():
        out = model(x[3500:])
        probs = torch.sigmoid(out) if logits_model else out
        # what BCEWithLogitsLoss really scores: sigmoid of the model output
        seen = torch.sigmoid(out)
    return ns["f1_score"](probs, y[3500:]), seen.min().item(), seen.max().item()


bug_f1, lo, hi = evaluate(bug, False)
fix_f1, _, _ = evaluate(fix, True)
verdict(lo >= 0.5 and hi <= 0.7311 and bug_f1 < 0.2,
        fix_f1 > bug_f1 + 0.3,
        [f"probabilities the loss compares with the tags (bug): [{lo:.3f}, {hi:.3f}], never below 0.5",
         f"validation F1 after 200 steps: bug {bug_f1:.3f}, fix {fix_f1:.3f}"])
