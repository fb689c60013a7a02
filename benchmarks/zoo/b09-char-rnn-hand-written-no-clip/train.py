import random

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(42)
torch.manual_seed(42)

HIDDEN_SIZE = 128
SEQ_LENGTH = 50
BATCH_SIZE = 32
LEARNING_RATE = 2e-3
N_ITERATIONS = 120


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
        self.W_xh = nn.Parameter(torch.empty(vocab_size, hidden_size))
        self.W_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))
        self.W_hy = nn.Parameter(torch.empty(hidden_size, vocab_size))
        self.b_h = nn.Parameter(torch.zeros(hidden_size))
        self.b_y = nn.Parameter(torch.zeros(vocab_size))
        for p in (self.W_xh, self.W_hh, self.W_hy):
            nn.init.kaiming_normal_(p, nonlinearity="tanh")

    def forward(self, inputs, h=None):
        seq_len, batch, _ = inputs.shape
        if h is None:
            h = inputs.new_zeros(batch, self.hidden_size)
        logits = []
        for t in range(seq_len):
            h = torch.tanh(inputs[t] @ self.W_xh + h @ self.W_hh + self.b_h)
            logits.append(h @ self.W_hy + self.b_y)
        return torch.stack(logits), h


def sample(model, seed_ix, n, vocab_size):
    x = F.one_hot(torch.tensor([seed_ix]), vocab_size).float()
    h = None
    out = []
    with torch.no_grad():
        for _ in range(n):
            logits, h = model(x.unsqueeze(0), h)
            ix = torch.multinomial(F.softmax(logits[-1, 0], -1), 1).item()
            x = F.one_hot(torch.tensor([ix]), vocab_size).float()
            out.append(ix)
    return out


def get_batch(encoded, vocab_size):
    starts = torch.randint(0, len(encoded) - SEQ_LENGTH - 1, (BATCH_SIZE,))
    chunks = torch.stack([encoded[s:s + SEQ_LENGTH + 1] for s in starts.tolist()], dim=1)
    inputs = F.one_hot(chunks[:-1], vocab_size).float()
    return inputs, chunks[1:]


def main():
    data = build_corpus()
    chars = sorted(set(data))
    vocab_size = len(chars)
    char_to_ix = {c: i for i, c in enumerate(chars)}
    ix_to_char = {i: c for i, c in enumerate(chars)}
    encoded = torch.tensor([char_to_ix[c] for c in data])
    print(f"data has {len(data)} characters, {vocab_size} unique")

    model = CharRNN(vocab_size, HIDDEN_SIZE)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    for n in range(N_ITERATIONS):
        inputs, targets = get_batch(encoded, vocab_size)
        logits, _ = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if n % 10 == 0:
            print(f"iter {n}, loss: {loss.item():.3f}")
        if n % 60 == 0:
            txt = "".join(ix_to_char[i] for i in sample(model, char_to_ix["t"], 60, vocab_size))
            print(f"----\n{txt}\n----")


if __name__ == "__main__":
    main()
