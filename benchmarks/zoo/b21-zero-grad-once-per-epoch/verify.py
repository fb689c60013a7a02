"""zero_grad() once per epoch: .grad sums every batch of the epoch, the step grows and the loss blows up. Fix: zero_grad() per batch."""
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
from torch.optim.optimizer import register_optimizer_step_pre_hook


def run_with_grad_norms(src):
    norms = []

    def pre(opt, args, kwargs):
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())

    h = register_optimizer_step_pre_hook(pre)
    try:
        ns = run(src)
    finally:
        h.remove()
    with torch.no_grad():
        val_loss = ns["nn"].BCEWithLogitsLoss()(ns["model"](ns["make_credit_data"]()[0][2500:]),
                                                ns["make_credit_data"]()[1][2500:]).item()
    return norms, val_loss


bug_n, bug_val = run_with_grad_norms(SRC)
fix_src = patch(SRC, "        optimizer.zero_grad()\n        for xb, yb in loader:\n",
                "        for xb, yb in loader:\n            optimizer.zero_grad()\n")
fix_n, fix_val = run_with_grad_norms(fix_src)
verdict(bug_n[19] / bug_n[0] > 5 and bug_val > 1.0,
        fix_n[19] / fix_n[0] < 3 and fix_val < 0.6,
        [f"gradient norm at step 20 / step 1: bug {bug_n[19] / bug_n[0]:.1f}x, fix {fix_n[19] / fix_n[0]:.2f}x",
         f"validation BCE after 4 epochs: bug {bug_val:.3f}, fix {fix_val:.3f}"])
