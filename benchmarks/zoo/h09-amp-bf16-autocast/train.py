"""Mixed precision done right on CPU: float32 master weights, forward under
torch.autocast("cpu", dtype=torch.bfloat16), loss and optimizer in float32.

bfloat16 has float32's exponent range, so gradients do not underflow and no GradScaler is
needed (the PyTorch AMP docs: scaling is for float16). The matmuls run in bfloat16; autocast
keeps layer_norm and cross_entropy in float32; the optimizer updates float32 parameters.
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

FEATURES, CLASSES = 32, 10
N, BATCH, STEPS = 8192, 128, 200


def make_data(n):
    g = torch.Generator().manual_seed(1)
    proj = torch.randn(FEATURES, 64, generator=g) / FEATURES ** 0.5
    readout = torch.randn(64, CLASSES, generator=g) / 8
    x = torch.randn(n, FEATURES, generator=g)
    y = (F.gelu(x @ proj * 1.5) @ readout).argmax(dim=1)
    return x, y


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, dim=128):
        super().__init__()
        self.stem = nn.Linear(FEATURES, dim)
        self.blocks = nn.Sequential(Block(dim), Block(dim))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.stem(x))))


def main(steps=STEPS, verbose=True):
    x, y = make_data(N)
    model = Net()                                   # float32 parameters
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, N, (BATCH,))
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(x[idx])                  # bfloat16 matmuls
            loss = F.cross_entropy(logits, y[idx])  # autocast runs this in float32
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 25 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.4f}")
    return losses, model


if __name__ == "__main__":
    main()
