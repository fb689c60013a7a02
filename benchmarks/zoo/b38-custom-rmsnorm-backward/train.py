import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

TEXT = ("the quick brown fox jumps over the lazy dog. "
        "a stitch in time saves nine. "
        "all that glitters is not gold. "
        "to be or not to be, that is the question. ") * 40
CHARS = sorted(set(TEXT))
STOI = {c: i for i, c in enumerate(CHARS)}
DATA = torch.tensor([STOI[c] for c in TEXT])
BLOCK = 32
D_MODEL = 64


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rms)
        return x / rms * weight

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rms = ctx.saved_tensors
        x_hat = x / rms
        grad_x = grad_out * weight / rms
        grad_w = (grad_out * x_hat).reshape(-1, x.shape[-1]).sum(0)
        return grad_x, grad_w, None


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return RMSNormFunction.apply(x, self.weight, self.eps)


class Block(nn.Module):
    def __init__(self, d, heads=4):
        super().__init__()
        self.norm1 = RMSNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = RMSNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.register_buffer("mask", torch.triu(torch.ones(BLOCK, BLOCK, dtype=torch.bool), 1))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class CharLM(nn.Module):
    def __init__(self, vocab, d=D_MODEL, n_layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(BLOCK, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n_layers))
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))


def get_batch(batch_size=16):
    starts = torch.randint(0, len(DATA) - BLOCK - 1, (batch_size,))
    x = torch.stack([DATA[s:s + BLOCK] for s in starts])
    y = torch.stack([DATA[s + 1:s + BLOCK + 1] for s in starts])
    return x, y


def main():
    model = CharLM(len(CHARS))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    history = []
    for step in range(120):
        x, y = get_batch()
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        history.append(loss.item())
        if step % 20 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}  ppl {math.exp(loss.item()):.2f}")
    return model, history


if __name__ == "__main__":
    model, history = main()
