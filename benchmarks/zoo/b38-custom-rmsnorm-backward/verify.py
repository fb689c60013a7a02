"""RMSNormFunction.backward treats the RMS as a constant and misses the -x_hat * mean(g * w * x_hat) term of dL/dx: gradcheck fails. Fix: the full derivative."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


def check(src):
    """gradcheck the Function on the hidden states it really receives (first RMSNorm, 8 positions of one sequence)."""
    captured = []

    def grab(module, args):
        if type(module).__name__ == "RMSNorm" and not captured:
            captured.append((args[0].detach(), module.weight.detach().clone()))

    h = torch.nn.modules.module.register_module_forward_pre_hook(grab)
    try:
        ns = run(patch(src, "range(120)", "range(3)"))
    finally:
        h.remove()
    fn = ns["RMSNormFunction"]
    x = captured[0][0][:1, :8].double().requires_grad_()         # rows are independent: 8 positions suffice
    w = (captured[0][1].double() + 0.1 * torch.randn(captured[0][1].shape, dtype=torch.float64)).requires_grad_()
    ok = torch.autograd.gradcheck(lambda a, b: fn.apply(a, b, 1e-6), (x, w), eps=1e-6, atol=1e-5, rtol=1e-3,
                                  raise_exception=False)
    v = torch.randn_like(x)
    analytic = torch.autograd.grad(fn.apply(x, w, 1e-6), x, v)[0]
    exact = torch.autograd.grad(x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, x, v)[0]
    return ok, ((analytic - exact).norm() / exact.norm()).item()


bug_ok, bug_err = check(SRC)
fix_ok, fix_err = check(patch(SRC, "        grad_x = grad_out * weight / rms\n",
                              "        gw = grad_out * weight\n"
                              "        grad_x = (gw - x_hat * (gw * x_hat).mean(dim=-1, keepdim=True)) / rms\n"))
verdict(not bug_ok and bug_err > 0.01,
        fix_ok and fix_err < 1e-6,
        [f"gradcheck on the training activations: bug {bug_ok}, fix {fix_ok}",
         f"relative error of dL/dx vs autograd of the same forward: bug {bug_err:.3f}, fix {fix_err:.2g}"])
