"""Adam(lr=0.1): single steps change conv/linear weights by more than their own norm; ReLUs die and the net stays at chance. Fix: lr=1e-3."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


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
