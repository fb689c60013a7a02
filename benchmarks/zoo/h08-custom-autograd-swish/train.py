"""An MLP whose activation is a hand-written torch.autograd.Function: swish, x * sigmoid(x),
with its derivative written out in backward (the memory-saving trick of EfficientNet
implementations that save only the input).

d/dx [x * s(x)] = s(x) + x * s(x) * (1 - s(x)) = s(x) * (1 + x * (1 - s(x))), which is what
backward returns; verify.py checks it with torch.autograd.gradcheck.
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

FEATURES, CLASSES = 20, 5
N, BATCH, STEPS = 4096, 64, 200


class SwishFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_out * s * (1 + x * (1 - s))


class Swish(nn.Module):
    def forward(self, x):
        return SwishFn.apply(x)


def make_data(n):
    g = torch.Generator().manual_seed(1)
    w1 = torch.randn(FEATURES, 32, generator=g) / FEATURES ** 0.5
    w2 = torch.randn(32, CLASSES, generator=g) / 32 ** 0.5
    x = torch.randn(n, FEATURES, generator=g)
    y = (torch.tanh(x @ w1 * 2) @ w2).argmax(dim=1)
    return x, y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 128), Swish(), nn.Linear(128, 128), Swish(),
                                 nn.Linear(128, CLASSES))

    def forward(self, x):
        return self.net(x)


def main(steps=STEPS, verbose=True):
    x, y = make_data(N)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, N, (BATCH,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 25 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.4f}")
    return losses, model


if __name__ == "__main__":
    main()
