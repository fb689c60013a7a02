"""A character-level language model with a time-major GRU (batch_first=False, the default),
in the idiom of the classic char-rnn scripts: batches are cut batch-first (B, T) from one
long text, transposed to (T, B) for the GRU, and every position predicts the next character.
B and T differ on purpose (16 and 32).

The text is made here: a repeated pattern of words over a 27-letter alphabet, with noise.

    python char_gru_time_major.py [--steps N] [--batch B] [--seq T]
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--seq", type=int, default=32)
parser.add_argument("--hidden", type=int, default=96)
args = parser.parse_args()
torch.manual_seed(1)

words = torch.randint(1, 27, (40, 5))
text = torch.cat([torch.cat([words[i], torch.zeros(1, dtype=torch.long)]) for i in torch.randint(0, 40, (3000,))])


class CharGRU(nn.Module):
    def __init__(self, vocab, embed, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.gru = nn.GRU(embed, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x):                       # x: (B, T) token ids
        e = self.embed(x)                       # (B, T, E)
        e = e.transpose(0, 1)                   # (T, B, E): the GRU is time-major
        h, _ = self.gru(e)
        return self.head(h).transpose(0, 1)     # (B, T, vocab)


def get_batch():
    starts = torch.randint(0, len(text) - args.seq - 1, (args.batch,))
    x = torch.stack([text[s:s + args.seq] for s in starts])
    y = torch.stack([text[s + 1:s + args.seq + 1] for s in starts])
    return x, y


model = CharGRU(27, 32, args.hidden)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(args.steps):
    x, y = get_batch()
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, 27), y.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if step % 20 == 0:
        print(f"step {step}: loss {loss.item():.3f}")
