"""A classifier fed by a DataLoader with worker processes, in the idiom of pytorch/examples
mnist: a Dataset whose __getitem__ builds each sample, shuffling, two workers, epochs.

The data is made here: 16-dimensional points in four clusters.

    python dataloader_workers.py [--epochs N] [--num-workers W]
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--num-workers", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.05)
args = parser.parse_args()
torch.manual_seed(1)


class Clusters(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.centres = torch.randn(4, 16, generator=g) * 0.4
        self.labels = torch.randint(0, 4, (n,), generator=g)
        self.noise = torch.randn(n, 16, generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        label = int(self.labels[i])
        return self.centres[label] + self.noise[i], label


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 4)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def main():
    loader = DataLoader(Clusters(2048), batch_size=64, shuffle=True, num_workers=args.num_workers)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(args.epochs):
        for batch_idx, (data, target) in enumerate(loader):
            optimizer.zero_grad()
            output = model(data)
            loss = F.cross_entropy(output, target)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
