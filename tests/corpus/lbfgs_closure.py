"""LBFGS with a closure, in the idiom of pytorch/examples time_sequence_prediction: the whole
data set in one batch, `optimizer.step(closure)` evaluating the loss many times per step.

    python lbfgs_closure.py [--steps N]
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=15)
args = parser.parse_args()
torch.manual_seed(0)

t = torch.linspace(0, 6.28, 200, dtype=torch.double)[:, None]
target = torch.sin(3 * t) + 0.5 * torch.cos(5 * t)


class Curve(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(1, 64)
        self.out = nn.Linear(64, 1)

    def forward(self, x):
        h = torch.tanh(self.hidden(x))
        return self.out(h)


seq = Curve().double()
criterion = nn.MSELoss()
optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8)
for i in range(args.steps):
    def closure():
        optimizer.zero_grad()
        out = seq(t)
        loss = criterion(out, target)
        loss.backward()
        return loss
    optimizer.step(closure)
    with torch.no_grad():
        print("step", i, "loss:", criterion(seq(t), target).item())
