"""MishFunction.backward drops the d softplus/dx = sigmoid(x) factor of the chain rule: gradcheck on the inputs training produces fails. Fix: multiply by torch.sigmoid(x)."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


import torch.nn.functional as F


def check(src):
    """gradcheck the Function on the activations it really receives (first Mish, an 8x8 patch of 2 channels of one image)."""
    captured = []

    def grab(module, args):
        if type(module).__name__ == "Mish" and not captured:
            captured.append(args[0].detach())

    h = torch.nn.modules.module.register_module_forward_pre_hook(grab)
    try:
        ns = run(patch(src, "range(100)", "range(5)"))
    finally:
        h.remove()
    fn = ns["MishFunction"]
    x = captured[0][:1, :2, :8, :8].double().requires_grad_()        # elementwise op: a slice suffices
    ok = torch.autograd.gradcheck(fn.apply, (x,), eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False)
    v = torch.randn_like(x)
    analytic = torch.autograd.grad(fn.apply(x), x, v)[0]
    exact = torch.autograd.grad(x * torch.tanh(F.softplus(x)), x, v)[0]
    return ok, ((analytic - exact).norm() / exact.norm()).item()


bug_ok, bug_err = check(SRC)
fix_ok, fix_err = check(patch(SRC, "return grad_output * (tsp + x * (1 - tsp * tsp))",
                              "return grad_output * (tsp + x * (1 - tsp * tsp) * torch.sigmoid(x))"))
verdict(not bug_ok and bug_err > 0.01,
        fix_ok and fix_err < 1e-6,
        [f"gradcheck on the training activations: bug {bug_ok}, fix {fix_ok}",
         f"relative error of backward vs autograd of the same forward: bug {bug_err:.3f}, fix {fix_err:.2g}"])
