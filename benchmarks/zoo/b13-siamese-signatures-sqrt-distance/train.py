import random

import torch
import torch.nn as nn

random.seed(1)
torch.manual_seed(1)

N_WRITERS = 10
SIGS_PER_WRITER = 40
FEATURE_DIM = 32
EMBED_DIM = 16
BATCH_SIZE = 64
STEPS = 150
MARGIN = 1.0


def make_signatures(seed=1):
    g = torch.Generator().manual_seed(seed)
    style = torch.randn(N_WRITERS, FEATURE_DIM, generator=g)
    feats, writers = [], []
    for w in range(N_WRITERS):
        feats.append(style[w] + 0.6 * torch.randn(SIGS_PER_WRITER, FEATURE_DIM, generator=g))
        writers += [w] * SIGS_PER_WRITER
    return torch.cat(feats), torch.tensor(writers)


class SignatureEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(FEATURE_DIM, 64), nn.ReLU(),
            nn.Linear(64, 64), nn.ReLU(),
            nn.Linear(64, EMBED_DIM),
        )

    def forward(self, x):
        return self.net(x)


def contrastive_loss(emb_a, emb_b, same, margin=MARGIN):
    dist = torch.sqrt(((emb_a - emb_b) ** 2).sum(dim=1))
    pos = same * dist.pow(2)
    neg = (1 - same) * torch.clamp(margin - dist, min=0).pow(2)
    return 0.5 * (pos + neg).mean(), dist


def sample_pairs(by_writer, n):
    a_idx, b_idx, same = [], [], []
    for _ in range(n):
        w = random.randrange(N_WRITERS)
        i = random.choice(by_writer[w])
        if random.random() < 0.5:
            j = random.choice(by_writer[w])
            same.append(1.0)
        else:
            other = random.choice([v for v in range(N_WRITERS) if v != w])
            j = random.choice(by_writer[other])
            same.append(0.0)
        a_idx.append(i)
        b_idx.append(j)
    return torch.tensor(a_idx), torch.tensor(b_idx), torch.tensor(same)


def main():
    feats, writers = make_signatures()
    by_writer = {w: torch.nonzero(writers == w).flatten().tolist() for w in range(N_WRITERS)}
    model = SignatureEncoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    for step in range(STEPS):
        a, b, same = sample_pairs(by_writer, BATCH_SIZE)
        loss, dist = contrastive_loss(model(feats[a]), model(feats[b]), same)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            pos_d = dist[same == 1].mean().item()
            neg_d = dist[same == 0].mean().item()
            print(f"step {step:3d}  loss {loss.item():.4f}  d(same) {pos_d:.3f}  d(diff) {neg_d:.3f}")


if __name__ == "__main__":
    main()
