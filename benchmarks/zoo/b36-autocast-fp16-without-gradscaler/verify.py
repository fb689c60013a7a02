"""autocast(float16) without a GradScaler: the reconstruction-loss gradients (~1e-6 per pixel) arrive at the float16 layers as subnormals or zeros. Fix: scale the loss with torch.amp.GradScaler."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


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
