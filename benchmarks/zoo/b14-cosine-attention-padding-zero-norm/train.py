import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(8)

VOCAB = 200
PAD = 0
CLS = 1
MAX_LEN = 24
D_MODEL = 64
N_HEADS = 4
BATCH_SIZE = 32
STEPS = 120
N_CLASSES = 3


def make_tickets(n, seed=8):
    g = torch.Generator().manual_seed(seed)
    keywords = {0: [10, 11, 12, 13], 1: [20, 21, 22, 23], 2: [30, 31, 32, 33]}
    labels = torch.randint(0, N_CLASSES, (n,), generator=g)
    lengths = torch.randint(6, MAX_LEN, (n,), generator=g)
    tokens = torch.full((n, MAX_LEN), PAD, dtype=torch.long)
    for i in range(n):
        L = int(lengths[i])
        seq = torch.randint(40, VOCAB, (L,), generator=g)
        kw = torch.tensor(keywords[int(labels[i])])
        pos = torch.randint(1, L, (2,), generator=g)
        seq[pos] = kw[torch.randint(0, 4, (2,), generator=g)]
        seq[0] = CLS
        tokens[i, :L] = seq
    return tokens, labels


def l2_normalize(x):
    return x / x.norm(dim=-1, keepdim=True)


class CosineSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model)
        self.logit_scale = nn.Parameter(torch.tensor(10.0))

    def forward(self, x, pad_mask):
        b, t, _ = x.shape
        split = lambda z: z.view(b, t, self.n_heads, self.d_head).transpose(1, 2)
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        scores = self.logit_scale * l2_normalize(q) @ l2_normalize(k).transpose(-2, -1)
        scores = scores.masked_fill(pad_mask[:, None, None, :], float("-inf"))
        attn = scores.softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, t, -1)
        return self.out_proj(out)


class TicketClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, D_MODEL)
        self.pos_emb = nn.Embedding(MAX_LEN, D_MODEL)
        self.attn = CosineSelfAttention(D_MODEL, N_HEADS)
        self.norm = nn.LayerNorm(D_MODEL)
        self.ff = nn.Sequential(nn.Linear(D_MODEL, 128), nn.GELU(), nn.Linear(128, D_MODEL))
        self.head = nn.Linear(D_MODEL, N_CLASSES)

    def forward(self, tokens):
        pad_mask = tokens == PAD
        pos = torch.arange(tokens.shape[1])
        x = self.tok_emb(tokens) + self.pos_emb(pos)
        x = x * (~pad_mask).unsqueeze(-1)
        x = x + self.attn(x, pad_mask)
        x = x + self.ff(self.norm(x))
        return self.head(x[:, 0])


def main():
    tokens, labels = make_tickets(2000)
    train_x, train_y, val_x, val_y = tokens[:1800], labels[:1800], tokens[1800:], labels[1800:]
    model = TicketClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    for step in range(STEPS):
        idx = torch.randint(0, len(train_x), (BATCH_SIZE,))
        loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            with torch.no_grad():
                acc = (model(val_x).argmax(1) == val_y).float().mean().item()
            print(f"step {step:3d}  loss {loss.item():.4f}  val acc {acc:.3f}")


if __name__ == "__main__":
    main()
