"""A bigram language model that learns slowly but surely, in the idiom of makemore's Bigram:
a zero-initialised table of next-character logits, AdamW at lr 5e-4, words padded with -1
targets that cross_entropy ignores.

    python bigram_slow.py [--max-steps N] [--learning-rate LR]
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=40)
parser.add_argument("--learning-rate", type=float, default=5e-4)
args = parser.parse_args()
torch.manual_seed(3407)

vocab, block = 27, 12
# Words from a random Markov chain over 26 letters (0 is the start/end token).
chain = torch.softmax(torch.randn(vocab, vocab) * 2.0, dim=1)


def word() -> list[int]:
    out, c = [], 0
    while len(out) < block - 1:
        c = int(torch.multinomial(chain[c], 1))
        if c == 0:
            break
        out.append(c)
    return out


class Bigram(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros((n, n)))

    def forward(self, idx, targets=None):
        logits = self.logits[idx]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def batch(n=32):
    x = torch.zeros(n, block, dtype=torch.long)
    y = torch.full((n, block), -1, dtype=torch.long)
    for i in range(n):
        w = word()
        x[i, 1:len(w) + 1] = torch.tensor(w)
        y[i, :len(w) + 1] = torch.tensor(w + [0])
    return x, y


model = Bigram(vocab)
optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01, betas=(0.9, 0.99),
                              eps=1e-8)
for step in range(args.max_steps):
    X, Y = batch()
    logits, loss = model(X, Y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(f"step {step} | loss {loss.item():.4f}")
