"""Ten stacked sigmoids: the gradient reaching the first layer is ~1e-9 of the head's."""
import os
import sys

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore", message="Full backward hook")


def build(batchnorm):
    torch.manual_seed(3)
    model = train.ActivityNet(train.CHANNELS * train.WINDOW, len(train.ACTIVITIES))
    if batchnorm:
        layers = []
        for m in model.body:
            layers.append(m)
            if isinstance(m, nn.Linear):
                layers.append(nn.BatchNorm1d(m.out_features))
        model.body = nn.Sequential(*layers)
    return model


def run(batchnorm, epochs=3):
    x, y = train.simulate_accelerometer(train.N_WINDOWS)
    mean, std = x[:2500].mean(0), x[:2500].std(0)
    x = (x - mean) / std
    model = build(batchnorm)
    grads = {}
    for name in ("body.0", "head"):
        model.get_submodule(name).register_full_backward_hook(
            lambda m, gi, go, name=name: grads.setdefault(name, []).append(go[0].norm().item()))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(epochs):
        perm = torch.randperm(2500)
        for i in range(0, 2500, train.BATCH_SIZE):
            idx = perm[i:i + train.BATCH_SIZE]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    ratio = sum(a / b for a, b in zip(grads["body.0"][:20], grads["head"][:20])) / 20
    with torch.no_grad():
        acc = (model(x[2500:]).argmax(1) == y[2500:]).float().mean().item()
    return ratio, acc


ratio_b, acc_b = run(False)
ratio_f, acc_f = run(True)
print(f"sigmoid stack: |dL/d out(body.0)| / |dL/d out(head)| = {ratio_b:.2e} (mean of first 20 steps); test acc {acc_b:.3f}")
print(f"BatchNorm1d before each sigmoid: ratio {ratio_f:.2e}; test acc {acc_f:.3f}")
ok_symptom = ratio_b < 1e-5
ok_fix = ratio_f > 1e-2 and acc_f > acc_b + 0.3
print(("PASS" if ok_symptom else "FAIL") + f": the gradient vanishes over the sigmoid stack ({ratio_b:.1e} of the head's reaches body.0)")
print(("PASS" if ok_fix else "FAIL") + f": with BatchNorm1d before each sigmoid it does not ({ratio_f:.1e}) and test acc rises {acc_b:.3f} -> {acc_f:.3f}")
sys.exit(0 if ok_symptom and ok_fix else 1)
