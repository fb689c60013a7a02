"""Hand-written self-attention that finds which earlier token a query token repeats.

Each sequence holds 8 random tokens; the last one repeats one of the first 7, and the model
predicts the position it repeats. Token and position embeddings (nn.Embedding, N(0, 1)),
one attention head with d_head = 128 written out by hand (Xavier-initialised projections),
Adam. The scores are q @ k^T without the 1/sqrt(d_head) of scaled dot-product attention.
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

VOCAB, T, D = 64, 8, 128
BATCH, STEPS = 64, 120


def make_batch(batch, g):
    tokens = torch.randint(0, VOCAB, (batch, T), generator=g)
    target = torch.randint(0, T - 1, (batch,), generator=g)
    tokens[:, -1] = tokens[torch.arange(batch), target]
    return tokens, target


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(D, D)
        self.k = nn.Linear(D, D)
        self.v = nn.Linear(D, D)
        for layer in (self.q, self.k, self.v):
            nn.init.xavier_normal_(layer.weight)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = q @ k.transpose(-2, -1)
        weights = F.softmax(scores, dim=-1)
        return weights @ v


class Pointer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(T, D)
        self.attn = SelfAttention()
        self.out = nn.Linear(D, T - 1)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        h = x + self.attn(x)
        return self.out(h[:, -1])


def accuracy(model, g, batches=8):
    with torch.no_grad():
        hits = 0
        for _ in range(batches):
            tokens, target = make_batch(BATCH, g)
            hits += (model(tokens).argmax(1) == target).sum().item()
    return hits / (batches * BATCH)


def main(steps=STEPS, verbose=True):
    g = torch.Generator().manual_seed(1)
    model = Pointer()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        tokens, target = make_batch(BATCH, g)
        loss = F.cross_entropy(model(tokens), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 20 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.4f}")
    return losses, model


if __name__ == "__main__":
    losses, model = main()
    print(f"held-out accuracy {accuracy(model, torch.Generator().manual_seed(7)):.3f}")
