"""autocast(float16) without a GradScaler: the reconstruction-loss gradients (~1e-6 per pixel) arrive at the float16 layers as subnormals or zeros. Fix: scale the loss with torch.amp.GradScaler."""
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
import copy

import torch.nn.functional as F

ns = run(patch(SRC, "range(100)", "range(20)"))          # the model after the first 20 steps
model = ns["model"]
torch.manual_seed(5)
clean = ns["make_strokes"](64, seed=9)
noisy = (clean + 0.3 * torch.randn_like(clean)).clamp(0, 1)
tiny = torch.finfo(torch.float16).tiny


def encoder_grads(model, autocast, scale=1.0):
    model.zero_grad(set_to_none=True)
    seen = {}

    def keep_output_grad(module, inputs, output):
        output.register_hook(lambda g: seen.__setitem__("g", g))

    handle = model.encoder[0].register_forward_hook(keep_output_grad)
    with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
        loss = F.mse_loss(model(noisy), clean)
    (loss * scale).backward()
    handle.remove()
    return model.encoder[0].weight.grad / scale, seen["g"]


g_ref, act_ref = encoder_grads(copy.deepcopy(model), autocast=False)
g_bug, act_bug = encoder_grads(copy.deepcopy(model), autocast=True)
scaler = torch.amp.GradScaler("cpu")                      # default init_scale 65536
g_fix, act_fix = encoder_grads(copy.deepcopy(model), autocast=True, scale=scaler.get_scale())

dense = act_ref != 0                                     # elements float32 keeps nonzero (ReLU zeros excluded)
lost_bug = (act_bug.abs() < tiny)[dense].float().mean().item()
lost_fix = (act_fix.abs() < tiny)[dense].float().mean().item()
err_bug = ((g_bug - g_ref).norm() / g_ref.norm()).item()
err_fix = ((g_fix - g_ref).norm() / g_ref.norm()).item()
verdict(lost_bug > 0.5 and err_bug > 10 * err_fix,
        lost_fix < 0.1,
        [f"float16 gradient elements arriving at encoder.0 that are 0 or subnormal (of those nonzero in float32): bug {lost_bug:.1%}, "
         f"fix (GradScaler scale {scaler.get_scale():.0f}) {lost_fix:.1%}",
         f"relative error of encoder.0.weight's gradient vs float32: bug {err_bug:.3f}, fix {err_fix:.4f}"])
