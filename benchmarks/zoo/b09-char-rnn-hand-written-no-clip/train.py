import random

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(42)
torch.manual_seed(42)

HIDDEN_SIZE = 256
SEQ_LENGTH = 25
LEARNING_RATE = 1e-1
N_ITERATIONS = 150


def build_corpus(n_sentences=400):
    subjects = ["the cat", "a dog", "my neighbour", "the old man", "a small bird", "the teacher"]
    verbs = ["sees", "follows", "likes", "ignores", "greets", "watches"]
    objects = ["the river", "a red ball", "the children", "an open door", "the market", "a quiet street"]
    endings = [".", " today.", " again.", " every morning."]
    lines = []
    for _ in range(n_sentences):
        lines.append(f"{random.choice(subjects)} {random.choice(verbs)} {random.choice(objects)}{random.choice(endings)}")
    return "\n".join(lines)


class CharRNN(nn.Module):
    def __init__(self, vocab_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.W_xh = nn.Parameter(torch.randn(vocab_size, hidden_size) * 0.1)
        self.W_hh = nn.Parameter(torch.randn(hidden_size, hidden_size) * 0.1)
        self.W_hy = nn.Parameter(torch.randn(hidden_size, vocab_size) * 0.1)
        self.b_h = nn.Parameter(torch.zeros(hidden_size))
        self.b_y = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, inputs, h):
        logits = []
        for x_t in inputs:
            h = torch.tanh(x_t @ self.W_xh + h @ self.W_hh + self.b_h)
            logits.append(h @ self.W_hy + self.b_y)
        return torch.stack(logits), h


def sample(model, h, seed_ix, n, vocab_size):
    x = F.one_hot(torch.tensor([seed_ix]), vocab_size).float()
    out = []
    with torch.no_grad():
        for _ in range(n):
            logits, h = model(x.unsqueeze(0), h)
            ix = torch.multinomial(F.softmax(logits[-1, 0], -1), 1).item()
            x = F.one_hot(torch.tensor([ix]), vocab_size).float()
            out.append(ix)
    return out


def main():
    data = build_corpus()
    chars = sorted(set(data))
    vocab_size = len(chars)
    char_to_ix = {c: i for i, c in enumerate(chars)}
    ix_to_char = {i: c for i, c in enumerate(chars)}
    encoded = torch.tensor([char_to_ix[c] for c in data])
    print(f"data has {len(data)} characters, {vocab_size} unique")

    model = CharRNN(vocab_size, HIDDEN_SIZE)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=LEARNING_RATE)

    p = 0
    h = torch.zeros(1, HIDDEN_SIZE)
    smooth_loss = -torch.log(torch.tensor(1.0 / vocab_size)).item() * SEQ_LENGTH
    for n in range(N_ITERATIONS):
        if p + SEQ_LENGTH + 1 >= len(encoded):
            h = torch.zeros(1, HIDDEN_SIZE)
            p = 0
        inputs = F.one_hot(encoded[p:p + SEQ_LENGTH], vocab_size).float().unsqueeze(1)
        targets = encoded[p + 1:p + SEQ_LENGTH + 1]

        logits, h_last = model(inputs, h.detach())
        loss = F.cross_entropy(logits.squeeze(1), targets, reduction="sum")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        h = h_last

        smooth_loss = smooth_loss * 0.9 + loss.item() * 0.1
        if n % 25 == 0:
            print(f"iter {n}, loss: {smooth_loss:.3f}")
        if n % 75 == 0:
            txt = "".join(ix_to_char[i] for i in sample(model, h.detach(), encoded[p].item(), 60, vocab_size))
            print(f"----\n{txt}\n----")
        p += SEQ_LENGTH


if __name__ == "__main__":
    main()
