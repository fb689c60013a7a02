"""Tabular classifier trained with gradient accumulation.

The effective batch is 128, but only 32 rows fit "in memory" at a time, so the script
accumulates gradients over ACCUM = 4 micro-batches: each micro-batch loss is divided by
ACCUM, backward() adds into .grad, and the optimizer steps and zeroes the gradients once
every ACCUM micro-batches. This is the standard, correct pattern.
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

N, FEATURES, CLASSES = 4096, 24, 6
MICRO_BATCH, ACCUM = 32, 4
MICRO_STEPS = 240                     # 60 optimizer steps


def make_data(n):
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(FEATURES, CLASSES, generator=g)
    x = torch.randn(n, FEATURES, generator=g)
    logits = x @ teacher + 0.5 * torch.tanh(x[:, :CLASSES] * 2.0)
    y = logits.argmax(dim=1)
    return x, y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(FEATURES, 128), nn.ReLU(),
            nn.Linear(128, 128), nn.ReLU(),
        )
        self.out = nn.Linear(128, CLASSES)

    def forward(self, x):
        return self.out(self.body(x))


def main(micro_steps=MICRO_STEPS, verbose=True):
    x, y = make_data(N)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-2)
    perm = torch.randperm(N)
    losses = []
    running = 0.0
    opt.zero_grad(set_to_none=True)
    for micro in range(micro_steps):
        start = (micro * MICRO_BATCH) % N
        idx = perm[start:start + MICRO_BATCH]
        logits = model(x[idx])
        loss = F.cross_entropy(logits, y[idx]) / ACCUM
        loss.backward()                              # accumulate into .grad
        running += loss.item()
        if (micro + 1) % ACCUM == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)           # zero once per effective batch
            losses.append(running)
            if verbose and len(losses) % 10 == 0:
                print(f"step {len(losses):3d}  loss {running:.4f}")
            running = 0.0
    return losses


if __name__ == "__main__":
    main()
