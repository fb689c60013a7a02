"""Character-level LSTM language model with tied input and output embeddings
(Press & Wolf 2017; Inan et al. 2017), on text from a small synthetic grammar.

self.decoder.weight = self.encoder.weight: one Parameter used twice, so its gradient is
the sum of the embedding-lookup gradient (sparse rows) and the softmax-layer gradient. The
optimizer sees it once (model.parameters() de-duplicates). Dropout and gradient-norm
clipping as in the PyTorch word_language_model example; Adam instead of plain SGD.
"""
import random

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
random.seed(0)

DIM, SEQ, BATCH, STEPS = 64, 32, 32, 200

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "a small bird", "the teacher"]
VERBS = ["sees", "likes", "follows", "finds", "hears", "paints"]
OBJECTS = ["the river", "a red ball", "the garden", "an apple", "the moon", "her house"]
ENDINGS = [".", " today.", " again.", " at night."]


def make_corpus(sentences=3000):
    rng = random.Random(1)
    text = " ".join(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(ENDINGS)}"
                    for _ in range(sentences))
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    return torch.tensor([stoi[c] for c in text]), chars


class TiedLSTMLM(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.encoder = nn.Embedding(vocab, DIM)
        self.drop = nn.Dropout(0.1)
        self.rnn = nn.LSTM(DIM, DIM, num_layers=1, batch_first=True)
        self.decoder = nn.Linear(DIM, vocab)
        self.decoder.weight = self.encoder.weight           # weight tying
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, idx):
        out, _ = self.rnn(self.drop(self.encoder(idx)))
        return self.decoder(self.drop(out))


def get_batch(data, g):
    starts = torch.randint(0, len(data) - SEQ - 1, (BATCH,), generator=g)
    x = torch.stack([data[s:s + SEQ] for s in starts])
    y = torch.stack([data[s + 1:s + SEQ + 1] for s in starts])
    return x, y


def main(steps=STEPS, verbose=True):
    data, chars = make_corpus()
    g = torch.Generator().manual_seed(2)
    model = TiedLSTMLM(len(chars))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        model.train()
        x, y = get_batch(data, g)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, len(chars)), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 25 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.4f}")
    return losses, model


if __name__ == "__main__":
    main()
