"""The LR range test (lr=1e-8 growing 10x every 20 epochs) is left in: every update is ~1e-9 of the weight and the loss is flat. Fix: train at a real LR."""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import mean, patch, run, verdict  # noqa: E402


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
