"""A small convolutional classifier trained with the recipe of pytorch/examples mnist: Adadelta
at lr 1.0 and StepLR(step_size=1, gamma=0.7), stepped once per epoch. Stepped once per batch
instead, the same scheduler multiplies the rate by 0.7 at every step: 1e-14 within 100 steps.

The data is made here: 12x12 images of four noisy stripe patterns.

    python scheduler_per_batch.py [--epochs N] [--lr LR] [--gamma G]
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=1.0)
parser.add_argument("--gamma", type=float, default=0.7)
args = parser.parse_args()
torch.manual_seed(1)


def stripes(n):
    labels = torch.randint(0, 4, (n,))
    rows, cols = torch.meshgrid(torch.arange(12.0), torch.arange(12.0), indexing="ij")
    patterns = torch.stack([torch.sin(rows * 0.8), torch.sin(cols * 0.8), torch.sin((rows + cols) * 0.6),
                            torch.sin((rows - cols) * 0.6)])
    images = patterns[labels] + 0.5 * torch.randn(n, 12, 12)
    return images.unsqueeze(1), labels


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(256, 64)
        self.fc2 = nn.Linear(64, 4)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout(torch.flatten(x, 1))
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def train(model, loader, optimizer, scheduler, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} lr {scheduler.get_last_lr()[0]:.3g} loss {loss.item():.4f}")


def main():
    loader = DataLoader(TensorDataset(*stripes(2048)), batch_size=64, shuffle=True)
    model = Net()
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(model, loader, optimizer, scheduler, epoch)
        scheduler.step()


if __name__ == "__main__":
    main()
