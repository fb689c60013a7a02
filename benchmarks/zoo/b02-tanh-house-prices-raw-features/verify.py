"""Raw house features saturate the first tanh layer; standardising them removes it."""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)


def run(standardise):
    torch.manual_seed(0)
    x, y = train.load_listings(train.N_HOUSES)
    n_train = 2400
    if standardise:
        mu, sd = x[:n_train].mean(0), x[:n_train].std(0)
        x = (x - mu) / sd
    model = train.PriceRegressor(x.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    flat = []
    for epoch in range(train.EPOCHS):
        perm = torch.randperm(n_train)
        for i in range(0, n_train, train.BATCH_SIZE):
            idx = perm[i:i + train.BATCH_SIZE]
            with torch.no_grad():
                h1 = torch.tanh(model.hidden1(x[idx]))
            flat.append(((1 - h1 ** 2) < 1e-2).float().mean().item())
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        test_mse = loss_fn(model(x[n_train:]), y[n_train:]).item()
    return sum(flat[:20]) / 20, test_mse


flat_b, mse_b = run(False)
flat_f, mse_f = run(True)
print(f"raw features:          hidden1 tanh flat share (first 20 steps) {flat_b:.1%}, test mse {mse_b:.4f}")
print(f"standardised features: hidden1 tanh flat share (first 20 steps) {flat_f:.1%}, test mse {mse_f:.4f}")
ok_symptom = flat_b >= 0.9
ok_fix = flat_f < 0.1 and mse_f < 0.5 * mse_b
print(("PASS" if ok_symptom else "FAIL") + f": the first tanh layer is saturated on raw features ({flat_b:.1%} of unit-samples have 1-tanh^2 < 0.01)")
print(("PASS" if ok_fix else "FAIL") + f": standardising the inputs unsaturates it ({flat_f:.1%}) and the test mse drops {mse_b:.3f} -> {mse_f:.3f}")
sys.exit(0 if ok_symptom and ok_fix else 1)
