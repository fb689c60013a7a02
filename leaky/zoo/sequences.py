"""Healthy sequence models: recurrences and attention that train and must produce no warning
or error: an LSTM tagger (saturating gates are normal), a clipped vanilla RNN with
orthogonal recurrent weights (the fix of rnn-exploding), a pre-norm Transformer with a -inf
causal mask.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from leaky.zoo._base import Example, batches, data_generator, fit

FILE = __file__


# ---------------------------------------------------------------------------------------
# lstm-clipped: LSTM tagger, loss on every time step, clipped gradient
# ---------------------------------------------------------------------------------------

class LSTMTagger(nn.Module):
    def __init__(self, d_in: int = 8, hidden: int = 32, classes: int = 2) -> None:
        super().__init__()
        self.lstm = nn.LSTM(d_in, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)
        with torch.no_grad():                                   # forget-gate bias 1
            self.lstm.bias_hh_l0[hidden:2 * hidden].fill_(1.0)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


def running_sign_task(n: int, seq: int, d_in: int, gen: torch.Generator):
    """Per time step: is the running sum of feature 0 so far positive?"""
    x = torch.randn(n, seq, d_in, generator=gen)
    y = (x[:, :, 0].cumsum(dim=1) > 0).long()
    return x, y


def _per_step_loss(logits, y):
    """Cross-entropy over every time step of a [batch, time, 2] tagging output."""
    return F.cross_entropy(logits.reshape(-1, 2), y.reshape(-1))


def run_lstm_clipped(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = LSTMTagger()
    gen = data_generator(seed)
    x_all, y_all = running_sign_task(512, 20, 8, gen)
    return fit(model, torch.optim.Adam(model.parameters(), lr=1e-2), x_all, y_all, _per_step_loss, steps,
               batch=32, clip=1.0)


# ---------------------------------------------------------------------------------------
# rnn-clipped-orthogonal: the fix of rnn-exploding
# ---------------------------------------------------------------------------------------

class RNNTagger(nn.Module):
    """nn.RNN (tanh) with a head on every time step."""

    def __init__(self, d_in: int = 8, hidden: int = 32, classes: int = 2) -> None:
        super().__init__()
        self.rnn = nn.RNN(d_in, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out)


def run_rnn_clipped_orthogonal(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = RNNTagger()
    with torch.no_grad():
        nn.init.orthogonal_(model.rnn.weight_hh_l0)
        model.rnn.weight_hh_l0.mul_(0.95)                       # spectral radius 0.95
    gen = data_generator(seed)
    x_all, y_all = running_sign_task(256, 40, 8, gen)
    return fit(model, torch.optim.Adam(model.parameters(), lr=1e-3), x_all, y_all, _per_step_loss, steps,
               batch=16, clip=1.0)


# ---------------------------------------------------------------------------------------
# prenorm-transformer: 2-layer pre-norm decoder, hand-written causal attention
# ---------------------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, max_len: int) -> None:
        super().__init__()
        self.heads = heads
        self.d_head = d_model // heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)
        mask = torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, x):
        b, t, c = x.shape
        q = self.q(x)
        k = self.k(x)
        v = self.v(x)
        q = q.view(b, t, self.heads, self.d_head)
        k = k.view(b, t, self.heads, self.d_head)
        v = v.view(b, t, self.heads, self.d_head)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
        v = v.transpose(1, 2)
        scores = q @ k.transpose(-2, -1)
        scores = scores / math.sqrt(self.d_head)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = probs @ v
        out = out.transpose(1, 2)
        out = out.reshape(b, t, c)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, max_len: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, max_len)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        h = self.ln1(x)
        h = self.attn(h)
        x = x + h
        h = self.ln2(x)
        h = self.fc1(h)
        h = self.act(h)
        h = self.fc2(h)
        x = x + h
        return x


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 16, d_model: int = 32, heads: int = 2, layers: int = 2,
                 max_len: int = 16) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([Block(d_model, heads, max_len) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        positions = torch.arange(t, device=idx.device)
        x = self.tok(idx)
        p = self.pos(positions)
        x = x + p
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        return self.head(x)


def progressions(n: int, seq: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    """Arithmetic progressions mod vocab: random start, random step in {1, 2, 3}."""
    start = torch.randint(0, vocab, (n, 1), generator=gen)
    stride = torch.randint(1, 4, (n, 1), generator=gen)
    return (start + stride * torch.arange(seq + 1)) % vocab


def run_prenorm_transformer(steps: int = 20, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = TinyGPT()
    gen = data_generator(seed)
    data = progressions(512, 16, 16, gen)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    losses = []
    for step in range(steps):
        rows = batches(512, 32, step)
        idx = data[rows, :-1]
        targets = data[rows, 1:]
        opt.zero_grad()
        logits = model(idx)
        loss = F.cross_entropy(logits.reshape(-1, 16), targets.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _healthy(name: str, title: str, run) -> Example:
    return Example(name=name, title=title, run=run, expect=(), healthy=True, file=FILE)


EXAMPLES = [
    _healthy("lstm-clipped", "LSTM tagger, loss on every step, clip_grad_norm_(1.0), Adam", run_lstm_clipped),
    _healthy("rnn-clipped-orthogonal",
             "Vanilla RNN, orthogonal recurrent init (radius 0.95), loss on every step, clipped (fix of rnn-exploding)",
             run_rnn_clipped_orthogonal),
    _healthy("prenorm-transformer",
             "2-layer pre-norm Transformer, hand-written causal attention with a -inf mask, AdamW",
             run_prenorm_transformer),
]
