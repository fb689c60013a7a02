"""MishFunction.backward drops the d softplus/dx = sigmoid(x) factor of the chain rule: gradcheck on the inputs training produces fails. Fix: multiply by torch.sigmoid(x)."""
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
