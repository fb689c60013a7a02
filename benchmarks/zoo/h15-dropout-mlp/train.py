"""Bag-of-words document classifier with dropout (p = 0.5 on the hidden layers, 0.1 on the
input), trained on a small labelled set, with model.train() / model.eval() switching.

Dropout zeroes half the hidden activations, and their gradients, on every training step by
design; at evaluation model.eval() turns it off.
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

VOCAB, TOPICS = 300, 4
N_TRAIN, N_VAL, BATCH, STEPS = 1024, 512, 64, 200


def make_data(n, seed):
    """Documents of 40 words drawn from a topic-specific word distribution; features are
    log(1 + count) over the vocabulary."""
    g = torch.Generator().manual_seed(0)
    topic_words = torch.softmax(1.5 * torch.randn(TOPICS, VOCAB, generator=g), dim=1)
    background = torch.full((VOCAB,), 1.0 / VOCAB)
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, TOPICS, (n,), generator=g)
    probs = 0.3 * topic_words[y] + 0.7 * background
    words = torch.multinomial(probs, 40, replacement=True, generator=g)
    counts = torch.zeros(n, VOCAB).scatter_add_(1, words, torch.ones(n, 40))
    return torch.log1p(counts), y


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Dropout(0.1),
            nn.Linear(VOCAB, 256), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(256, 256), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(256, TOPICS),
        )

    def forward(self, x):
        return self.net(x)


def main(steps=STEPS, verbose=True):
    x, y = make_data(N_TRAIN, seed=1)
    x_val, y_val = make_data(N_VAL, seed=2)
    model = Classifier()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    losses = []
    for step in range(steps):
        model.train()
        idx = torch.randint(0, N_TRAIN, (BATCH,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 25 == 0:
            model.eval()
            with torch.no_grad():
                val = F.cross_entropy(model(x_val), y_val).item()
            print(f"step {step + 1:3d}  loss {loss.item():.4f}  val loss {val:.4f}")
    return losses, model


if __name__ == "__main__":
    main()
