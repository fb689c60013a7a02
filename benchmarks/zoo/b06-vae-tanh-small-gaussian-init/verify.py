"""N(0, 0.01) init in a deep tanh VAE: the gradient reaching the encoder input layer vanishes."""
import os
import sys
import warnings

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore", message="Full backward hook")


def run(xavier, epochs=3):
    torch.manual_seed(11)
    data = train.make_spectra(train.N_SAMPLES, train.DATA_DIM)
    model = train.SpectraVAE()
    if xavier:
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight, gain=nn.init.calculate_gain("tanh"))
                nn.init.zeros_(m.bias)
    grads = {}
    for name in ("encoder.0", "to_x"):
        model.get_submodule(name).register_full_backward_hook(
            lambda m, gi, go, name=name: grads.setdefault(name, []).append(go[0].norm().item()))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    losses = []
    for epoch in range(epochs):
        perm = torch.randperm(train.N_SAMPLES)
        for i in range(0, train.N_SAMPLES, train.BATCH_SIZE):
            x = data[perm[i:i + train.BATCH_SIZE]]
            recon, mu, logvar = model(x)
            loss, rec, kl = train.vae_loss(recon, x, mu, logvar)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(rec.item())
    ratio = sum(a / b for a, b in zip(grads["encoder.0"][:20], grads["to_x"][:20])) / 20
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    return ratio, first, last


ratio_b, first_b, last_b = run(False)
ratio_f, first_f, last_f = run(True)
print(f"normal_(std=0.01): |grad at encoder.0 output| / |grad at to_x output| = {ratio_b:.2e}; recon loss {first_b:.2f} -> {last_b:.2f}")
print(f"xavier_uniform_(gain=tanh): ratio {ratio_f:.2e}; recon loss {first_f:.2f} -> {last_f:.2f}")
ok_symptom = ratio_b < 1e-5 and last_b > 0.95 * first_b
ok_fix = ratio_f > 1e-2 and last_f < 0.7 * first_f
print(("PASS" if ok_symptom else "FAIL") + f": the gradient vanishes through the tanh stack ({ratio_b:.1e}) and the reconstruction does not improve")
print(("PASS" if ok_fix else "FAIL") + f": with Xavier init the gradient reaches the encoder ({ratio_f:.1e}) and the reconstruction loss falls {first_f:.1f} -> {last_f:.1f}")
sys.exit(0 if ok_symptom and ok_fix else 1)
