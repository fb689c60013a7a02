"""Tabular regression (categorical embeddings + numeric features) trained with AdamW and
the usual schedule: linear warmup for the first WARMUP steps, then cosine decay to 10%.

During warmup the learning rate starts small on purpose (Adam's second-moment estimates
are still noisy), so the first updates are small; the schedule is built with LambdaLR and
stepped once per optimizer step.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

CARDS = [12, 7, 30]               # cardinality of the categorical columns
NUMERIC = 8
N, BATCH, STEPS, WARMUP = 8192, 128, 200, 20
PEAK_LR = 3e-3


def make_data(n):
    g = torch.Generator().manual_seed(1)
    effects = [torch.randn(c, generator=g) for c in CARDS]
    w = torch.randn(NUMERIC, generator=g) / NUMERIC ** 0.5
    cats = torch.stack([torch.randint(0, c, (n,), generator=g) for c in CARDS], dim=1)
    num = torch.randn(n, NUMERIC, generator=g)
    y = sum(e[cats[:, i]] for i, e in enumerate(effects)) + torch.tanh(num @ w) * 2 \
        + 0.5 * effects[0][cats[:, 0]] * num[:, 0] + 0.1 * torch.randn(n, generator=g)
    return cats, num, (y - y.mean()) / y.std()


class TabularNet(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.embeds = nn.ModuleList(nn.Embedding(c, dim) for c in CARDS)
        self.mlp = nn.Sequential(nn.Linear(dim * len(CARDS) + NUMERIC, 128), nn.ReLU(),
                                 nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, cats, num):
        parts = [emb(cats[:, i]) for i, emb in enumerate(self.embeds)] + [num]
        return self.mlp(torch.cat(parts, dim=1)).squeeze(-1)


def warmup_cosine(step):
    if step < WARMUP:
        return (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, STEPS - WARMUP)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def main(steps=STEPS, verbose=True):
    cats, num, y = make_data(N)
    model = TabularNet()
    opt = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, N, (BATCH,))
        loss = F.mse_loss(model(cats[idx], num[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 20 == 0:
            print(f"step {step + 1:3d}  lr {sched.get_last_lr()[0]:.2e}  loss {loss.item():.4f}")
    return losses, model


if __name__ == "__main__":
    main()
