"""A small attention classifier over padded token sequences, in the idiom of hand-written
transformer tutorials: scores q·kᵀ/√d, the padding positions filled with -inf by
masked_fill before the softmax, a mean over the valid positions, a linear head.

The data is made here: sequences of 4 to 12 tokens padded to 12 with token 0; the label is
whether token 7 occurs.

    python masked_attention.py [--steps N]
"""
import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch", type=int, default=32)
args = parser.parse_args()
torch.manual_seed(1)
PAD, LENGTH, VOCAB = 0, 12, 20


def make_batch():
    lengths = torch.randint(4, LENGTH + 1, (args.batch,))
    tokens = torch.randint(1, VOCAB, (args.batch, LENGTH))
    tokens[torch.arange(LENGTH)[None, :] >= lengths[:, None]] = PAD
    return tokens, (tokens == 7).any(1).long()


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.d = d

    def forward(self, x, pad):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / math.sqrt(self.d)
        scores = scores.masked_fill(pad[:, None, :], float("-inf"))
        return F.softmax(scores, dim=-1) @ v


class Classifier(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.attn = Attention(d)
        self.head = nn.Linear(d, 2)

    def forward(self, tokens):
        pad = tokens == PAD
        h = self.attn(self.embed(tokens), pad)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1))


model = Classifier()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(args.steps):
    tokens, labels = make_batch()
    loss = F.cross_entropy(model(tokens), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 20 == 0:
        print(f"step {step}: loss {loss.item():.3f}")
