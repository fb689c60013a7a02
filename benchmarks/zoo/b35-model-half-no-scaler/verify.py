"""model.half() with no loss scaling: the per-element MSE gradients (~1e-6) are subnormal or flushed to 0 in float16, so the weight gradient the optimizer gets is wrong. Fix: float32 weights + autocast(float16) + GradScaler."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


import copy

import torch.nn.functional as F

ns = run(patch(SRC, "range(150)", "range(20)"))          # the model after the first 20 steps, as trained
model16 = ns["model"]
theta, spectra = ns["simulate_spectra"](256, seed=7)
tiny = torch.finfo(torch.float16).tiny


def first_layer_grads(model, x, y, dtype, scale=1.0, autocast=False):
    """Gradient of the first Linear's weight, and the gradient arriving at its output."""
    model.zero_grad(set_to_none=True)
    seen = {}

    def keep_output_grad(module, inputs, output):
        output.register_hook(lambda g: seen.__setitem__("g", g))

    handle = model.net[0].register_forward_hook(keep_output_grad)
    with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
        loss = F.mse_loss(model(x.to(dtype)), y.to(dtype))
    (loss.float() * scale).backward()
    handle.remove()
    return model.net[0].weight.grad.float() / scale, seen["g"]


ref32 = copy.deepcopy(model16).float()
g_ref, act_ref = first_layer_grads(ref32, theta, spectra, torch.float32)
g_bug, act_bug = first_layer_grads(model16, theta, spectra, torch.float16)
g_fix, act_fix = first_layer_grads(copy.deepcopy(ref32), theta, spectra, torch.float32, scale=65536.0, autocast=True)

dense = act_ref != 0                                     # elements float32 keeps nonzero (ReLU zeros excluded)
lost_bug = (act_bug.abs() < tiny)[dense].float().mean().item()
lost_fix = (act_fix.abs() < tiny)[dense].float().mean().item()
err_bug = ((g_bug - g_ref).norm() / g_ref.norm()).item()
err_fix = ((g_fix - g_ref).norm() / g_ref.norm()).item()
verdict(lost_bug > 0.5 and err_bug > 10 * err_fix,
        lost_fix < 0.1 and err_fix < 0.02,
        [f"gradient elements arriving at net.0 that are 0 or subnormal (of those nonzero in float32): bug {lost_bug:.1%}, "
         f"fix (scaled by 65536) {lost_fix:.1%}",
         f"relative error of net.0.weight's gradient vs the float32 computation: bug {err_bug:.3f}, fix {err_fix:.4f}"])
