"""Adam(lr=0.1): single steps change conv/linear weights by more than their own norm; ReLUs die and the net stays at chance. Fix: lr=1e-3."""
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
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook


def run_with_ratios(src):
    ratios, before = [], {}

    def pre(opt, args, kwargs):
        before.clear()
        before.update({id(p): p.detach().clone() for g in opt.param_groups for p in g["params"] if p.dim() >= 2})

    def post(opt, args, kwargs):
        ratios.append(max(((p.detach() - before[id(p)]).norm() / before[id(p)].norm()).item()
                          for g in opt.param_groups for p in g["params"] if p.dim() >= 2))

    h1, h2 = register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)
    try:
        ns = run(src)
    finally:
        h1.remove(), h2.remove()
    model = ns["model"].eval()
    images, labels = ns["make_textures"](300, seed=2)
    with torch.no_grad():
        acc = (model(images).argmax(1) == labels).float().mean().item()
    return ratios, acc


bug_r, bug_acc = run_with_ratios(SRC)
fix_r, fix_acc = run_with_ratios(patch(SRC, "lr=0.1)", "lr=1e-3)"))
verdict(max(bug_r[:20]) > 1.0 and bug_acc < 0.3,
        max(fix_r[:20]) < 0.2 and fix_acc > bug_acc + 0.3,
        [f"largest ||dw||/||w|| of any weight in the first 20 steps: bug {max(bug_r[:20]):.3g}, fix {max(fix_r[:20]):.3g}",
         f"test accuracy after 80 steps (chance 0.167): bug {bug_acc:.3f}, fix {fix_acc:.3f}"])
