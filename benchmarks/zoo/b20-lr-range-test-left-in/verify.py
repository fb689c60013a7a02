"""The LR range test (lr=1e-8 growing 10x every 20 epochs) is left in: every update is ~1e-9 of the weight and the loss is flat. Fix: train at a real LR."""
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
    return ratios, ns["history"]


bug_r, bug_h = run_with_ratios(SRC)
fix_src = patch(SRC, "lr=1e-8, momentum=0.9", "lr=5e-3, momentum=0.9")
fix_src = patch(fix_src, "lambda epoch: 10 ** (epoch / 20)", "lambda epoch: 1.0")
fix_r, fix_h = run_with_ratios(fix_src)
bug_drop = (mean(bug_h[:30]) - mean(bug_h[-30:])) / mean(bug_h[:30])
fix_drop = (mean(fix_h[:30]) - mean(fix_h[-30:])) / mean(fix_h[:30])
verdict(max(bug_r) < 1e-6 and abs(bug_drop) < 0.01,
        min(fix_r) > 1e-5 and fix_drop > 0.5,
        [f"largest ||dw||/||w|| in epoch 0: bug {max(bug_r[:30]):.2g}; over all 240 steps: bug {max(bug_r):.2g}; "
         f"smallest with the fix {min(fix_r):.2g}",
         f"Huber loss, first 30 -> last 30 steps: bug {mean(bug_h[:30]):.3f} -> {mean(bug_h[-30:]):.3f} ({bug_drop:.1%}), "
         f"fix {mean(fix_h[:30]):.3f} -> {mean(fix_h[-30:]):.3f} ({fix_drop:.1%})"])
