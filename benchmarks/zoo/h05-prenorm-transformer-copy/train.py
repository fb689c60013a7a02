"""A small pre-norm, decoder-only Transformer learning to copy a sequence.

Input: 8 random tokens, a separator, then the same 8 tokens; the model predicts each next
token with a causal mask (masked_fill with -inf above the diagonal, nanoGPT style), and the
loss counts only the copied half (ignore_index=-100 on the rest). Copying is solved by
attending to exactly one earlier position, so the attention is deliberately sharp: the
scores use a low temperature (TAU = 0.5) and become near one-hot as the model learns.
Pre-norm residual blocks (LayerNorm before attention and MLP), AdamW, clip_grad_norm_.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

VOCAB, L = 16, 8
SEP = VOCAB                       # separator token id
SEQ = 2 * L + 1
D, HEADS, LAYERS = 64, 4, 2
TAU = 0.5                         # attention temperature
BATCH, STEPS = 32, 150


def make_batch(batch, g):
    a = torch.randint(0, VOCAB, (batch, L), generator=g)
    seq = torch.cat([a, torch.full((batch, 1), SEP), a], dim=1)      # (batch, 17)
    inputs, targets = seq[:, :-1], seq[:, 1:].clone()
    targets[:, :L] = -100                                            # only score the copy
    return inputs, targets


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.register_buffer("mask", torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), diagonal=1))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q = q.view(b, t, HEADS, D // HEADS).transpose(1, 2)
        k = k.view(b, t, HEADS, D // HEADS).transpose(1, 2)
        v = v.view(b, t, HEADS, D // HEADS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / (math.sqrt(D // HEADS) * TAU)
        att = att.masked_fill(self.mask[:t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, D)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = CausalSelfAttention()
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB + 1, D)
        self.pos = nn.Embedding(SEQ, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB + 1)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def main(steps=STEPS, verbose=True):
    g = torch.Generator().manual_seed(1)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), weight_decay=0.01)
    losses = []
    for step in range(steps):
        inputs, targets = make_batch(BATCH, g)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB + 1), targets.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 25 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.4f}")
    return losses, model


if __name__ == "__main__":
    main()
