"""A healthy classifier of synthetic sensor readings, in the idiom people write: the copy
that tests/unit/diff/test_pairs.py changes one line of at a time (each marked # <name>)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
torch.manual_seed(args.seed)

data = torch.Generator().manual_seed(1234)
N, D, H, K = 512, 16, 64, 4
x = torch.randn(N, D, generator=data) * 30 + 200   # readings
teacher = torch.randn(D, K, generator=data)
y = ((x - 200) / 30 @ teacher).argmax(dim=1)
x = (x - x.mean(dim=0)) / x.std(dim=0)   # normalise


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(D, H)
        self.bn = nn.BatchNorm1d(H)
        self.fc2 = nn.Linear(H, H)
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(H, K)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=m.in_features ** -0.5)   # init
                nn.init.zeros_(m.bias)

    def forward(self, x):
        h = torch.tanh(self.bn(self.fc1(x)))
        h = F.gelu(self.fc2(h))   # activation
        h = self.drop(h)   # cut
        return self.out(h)


model = Net()
model.train()   # mode
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
schedule = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.7)
for epoch in range(20):
    for i in range(0, N, 64):
        loss = F.cross_entropy(model(x[i:i + 64]), y[i:i + 64])
        opt.zero_grad()
        loss.backward()
        opt.step()
    schedule.step()   # schedule
    model.eval()   # evaluate
    with torch.no_grad():
        accuracy = (model(x).argmax(dim=1) == y).float().mean()
    model.train()   # back to training
    print(f"epoch {epoch}: loss {loss.item():.3f}, accuracy {accuracy:.2f}")   # log
