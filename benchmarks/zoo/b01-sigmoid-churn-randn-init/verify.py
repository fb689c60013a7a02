"""Saturated sigmoids in ChurnNet: measure the flat share, then re-run with Xavier init."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)


def flat_share_run(fixed, steps=20):
    torch.manual_seed(7)
    x, y = train.make_churn_data(train.N_CUSTOMERS, train.N_FEATURES)
    n_train = int(0.8 * train.N_CUSTOMERS)
    model = train.ChurnNet(train.N_FEATURES)
    if fixed:
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
    flat = {"act1": [], "act2": []}

    def hook(name):
        def fn(mod, inp, out):
            if torch.is_grad_enabled():
                flat[name].append(((out * (1 - out)) < 2.5e-3).float().mean().item())
        return fn

    model.act1.register_forward_hook(hook("act1"))
    model.act2.register_forward_hook(hook("act2"))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        idx = torch.randint(0, n_train, (train.BATCH_SIZE,))
        loss = F.binary_cross_entropy_with_logits(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    share = {k: sum(v) / len(v) for k, v in flat.items()}
    return share


broken = flat_share_run(False)
fixed = flat_share_run(True)
print(f"broken (normal_ std=1): flat share over 20 steps: act1 {broken['act1']:.1%}, act2 {broken['act2']:.1%}")
print(f"fixed (xavier_uniform_): flat share over 20 steps: act1 {fixed['act1']:.1%}, act2 {fixed['act2']:.1%}")

ok_symptom = broken["act2"] >= 0.5
ok_fix = fixed["act1"] < 0.05 and fixed["act2"] < 0.05
print(("PASS" if ok_symptom else "FAIL") + f": act2 is saturated with randn init ({broken['act2']:.1%} of unit-samples have s(1-s) < 2.5e-3)")
print(("PASS" if ok_fix else "FAIL") + f": with Xavier init no sigmoid layer is saturated (act1 {fixed['act1']:.1%}, act2 {fixed['act2']:.1%})")
sys.exit(0 if ok_symptom and ok_fix else 1)
