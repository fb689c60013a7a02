"""MLP classifier with the classic large-step recipe: SGD lr 0.1, Nesterov momentum 0.9,
weight decay 5e-4, and a step decay of the learning rate.

lr 0.1 with momentum 0.9 is an effective step of 1.0, high but standard (the ResNet /
CIFAR recipe). It is stable here because the inputs are standardised, the layers use
Kaiming initialisation and the loss is a mean cross-entropy over the batch.
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

FEATURES, CLASSES = 40, 8
N, BATCH, STEPS = 8192, 128, 200


def make_data(n):
    g = torch.Generator().manual_seed(1)
    centers = 0.8 * torch.randn(CLASSES, FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (n,), generator=g)
    x = centers[y] + 2.5 * torch.randn(n, FEATURES, generator=g)
    x = x * torch.linspace(0.5, 20.0, FEATURES)           # raw features on different scales
    x = (x - x.mean(0)) / x.std(0)                        # standardise
    return x, y


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(FEATURES, 256), nn.ReLU(),
            nn.Linear(256, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, CLASSES),
        )
        for m in self.net:
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.net(x)


def main(steps=STEPS, verbose=True):
    x, y = make_data(N)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[120, 170], gamma=0.1)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, N, (BATCH,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 25 == 0:
            print(f"step {step + 1:3d}  lr {sched.get_last_lr()[0]:.3f}  loss {loss.item():.4f}")
    return losses, model


if __name__ == "__main__":
    main()
