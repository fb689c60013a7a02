"""Layers trained one at a time, each with its own local loss and optimizer, in the idiom of
the forward-forward examples: a layer's "goodness" (the mean square of its output) is pushed
up on positive data and down on negative data; when its steps are done, its output is
computed once, detached, and becomes the next layer's input. The first layer is not run
again while the second trains.

The data is made here: 10 classes of 2-d blobs embedded in 64 dims; a positive sample carries
its true label one-hot in its first 10 inputs, a negative one a wrong label.

    python layer_local.py [--layer-steps N] [--lr LR]
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--layer-steps", type=int, default=40)
parser.add_argument("--lr", type=float, default=0.03)
parser.add_argument("--threshold", type=float, default=2.0)
args = parser.parse_args()
torch.manual_seed(1)

centres = torch.randn(10, 54) * 2.0
labels = torch.randint(0, 10, (1024,))
features = centres[labels] + torch.randn(1024, 54)


def with_label(x, y):
    return torch.cat([F.one_hot(y, 10).float() * x.abs().max(), x], dim=1)


class LocalLayer(nn.Linear):
    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.relu = nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=args.lr)

    def forward(self, x):
        x = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(super().forward(x))

    def train_layer(self, x_pos, x_neg):
        for _ in range(args.layer_steps):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = F.softplus(torch.cat([-g_pos + args.threshold, g_neg - args.threshold])).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


layers = [LocalLayer(64, 500), LocalLayer(500, 500)]
wrong = (labels + torch.randint(1, 10, labels.shape)) % 10
h_pos, h_neg = with_label(features, labels), with_label(features, wrong)
for i, layer in enumerate(layers):
    h_pos, h_neg = layer.train_layer(h_pos, h_neg)
    print(f"layer {i}: goodness pos {h_pos.pow(2).mean():.3f} neg {h_neg.pow(2).mean():.3f}")
