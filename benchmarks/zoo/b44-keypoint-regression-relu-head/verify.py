"""The ReLU on the output: one batch, repeated for 300 steps, keeps about half of its loss
(the negative targets are out of reach); without the ReLU it is fitted almost exactly."""
import pathlib
import sys

import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


def overfit_one_batch(ns):
    torch.manual_seed(0)
    model = ns["LandmarkHead"]()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xb, yb = ns["x"][:64], ns["y"][:64]
    first = F.mse_loss(model(xb), yb).item()
    for _ in range(300):
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return first, loss.item()


bug = run(SRC)
fix = run(patch(SRC, "nn.Linear(128, 2), nn.ReLU())", "nn.Linear(128, 2))"))
b0, b1 = overfit_one_batch(bug)
f0, f1 = overfit_one_batch(fix)
negative = (bug["y"] < 0).float().mean().item()
verdict(b1 > 0.3 * b0, f1 < 0.05 * f0,
        [f"one batch, 300 steps: bug {b0:.3f} -> {b1:.3f}, fix {f0:.3f} -> {f1:.3f}",
         f"share of negative targets: {negative:.2f}"])
