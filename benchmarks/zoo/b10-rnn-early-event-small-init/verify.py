"""Every parameter of FaultDetector drawn from N(0, 0.01): rho(W_hh) ~ 0.08, the early fault never reaches the loss."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)


def run(fixed, epochs=3):
    torch.manual_seed(21)
    x, y = train.make_machine_logs(train.N_SEQUENCES)
    model = train.FaultDetector(train.N_FEATURES, train.HIDDEN)
    if fixed:
        torch.manual_seed(21)
        model.rnn.reset_parameters()
        model.classifier.reset_parameters()
        nn.init.orthogonal_(model.rnn.weight_hh_l0)
    rho = torch.linalg.eigvals(model.rnn.weight_hh_l0.detach()).abs().max().item()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    profile = None
    for epoch in range(epochs):
        perm = torch.randperm(3500)
        for i in range(0, 3500, train.BATCH_SIZE):
            idx = perm[i:i + train.BATCH_SIZE]
            xb = x[idx].clone().requires_grad_(True)
            loss = F.cross_entropy(model(xb), y[idx])
            opt.zero_grad()
            loss.backward()
            if profile is None:
                profile = xb.grad.norm(dim=(0, 2))
            opt.step()
    with torch.no_grad():
        acc = (model(x[3500:]).argmax(1) == y[3500:]).float().mean().item()
    return rho, (profile[0] / profile[-1]).item(), acc


rho_b, ratio_b, acc_b = run(False)
rho_f, ratio_f, acc_f = run(True)
print(f"normal_(std=0.01) everywhere: rho(W_hh) {rho_b:.3f}; |dL/dx_0| / |dL/dx_59| at step 0 = {ratio_b:.2e}; test acc {acc_b:.3f}")
print(f"default init + orthogonal W_hh: rho {rho_f:.3f}; ratio {ratio_f:.2e}; test acc {acc_f:.3f}")
ok_symptom = rho_b < 0.5 and ratio_b < 1e-10 and acc_b < 0.6
ok_fix = ratio_f > 1e-3 and acc_f > 0.9
print(("PASS" if ok_symptom else "FAIL") + f": the gradient reaching the first time step is {ratio_b:.1e} of the last one's and the model stays at chance ({acc_b:.3f})")
print(("PASS" if ok_fix else "FAIL") + f": with an orthogonal W_hh it is {ratio_f:.1e} and the early fault is learned (test acc {acc_f:.3f})")
sys.exit(0 if ok_symptom and ok_fix else 1)
