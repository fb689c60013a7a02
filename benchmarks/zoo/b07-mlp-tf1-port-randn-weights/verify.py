"""torch.randn weights (TF1's tf.random_normal default stddev=1): gradients grow 1e5x toward the input."""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)


def run(he_init, steps=150):
    torch.manual_seed(5)
    x, y = train.make_load_series(train.N_HOURS)
    split = int(0.9 * len(x))
    model = train.LoadForecaster(train.LAGS, train.N_HIDDEN)
    if he_init:
        with torch.no_grad():
            for layer in list(model.hidden) + [model.out]:
                layer.weight.normal_(0.0, math.sqrt(2.0 / layer.weight.shape[0]))
                layer.bias.zero_()
    outs = {}

    def record_output_grad(name):
        def hook(module, inputs, output):
            if output.requires_grad:
                output.register_hook(lambda g: outs.setdefault(name, []).append(g.norm().item()))
        return hook

    model.hidden[0].register_forward_hook(record_output_grad("hidden.0"))
    model.out.register_forward_hook(record_output_grad("out"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    grad_norms = []
    for step in range(steps):
        idx = torch.randint(0, split, (train.BATCH_SIZE,))
        loss = loss_fn(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        grad_norms.append(torch.sqrt(sum(p.grad.norm() ** 2 for p in model.parameters())).item())
        opt.step()
    with torch.no_grad():
        test_mse = loss_fn(model(x[split:]), y[split:]).item()
    ratio = sum(a / b for a, b in zip(outs["hidden.0"][:20], outs["out"][:20])) / 20
    return ratio, grad_norms[0], test_mse


ratio_b, g0_b, mse_b = run(False)
ratio_f, g0_f, mse_f = run(True)
print(f"randn init: |grad at hidden.0 output| / |grad at out output| = {ratio_b:.2e}; first-step grad norm {g0_b:.2e}; test mse after 150 steps {mse_b:.3g}")
print(f"He init:    ratio {ratio_f:.2e}; first-step grad norm {g0_f:.2e}; test mse {mse_f:.3g}")
ok_symptom = ratio_b > 1e3
ok_fix = ratio_f < 1e2 and mse_f < 1.0
print(("PASS" if ok_symptom else "FAIL") + f": the gradient grows {ratio_b:.1e}x from the output layer to the first layer")
print(("PASS" if ok_fix else "FAIL") + f": with He-scaled weights the growth is {ratio_f:.1f}x and the test mse is {mse_f:.3f} (was {mse_b:.3g})")
sys.exit(0 if ok_symptom and ok_fix else 1)
