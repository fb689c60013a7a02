"""zero_grad() once per epoch: .grad sums every batch of the epoch, the step grows and the loss blows up. Fix: zero_grad() per batch."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


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
