"""Sequence classification with a hand-written LSTM, chrono-initialised forget gates and
gradient-norm clipping.

The cell is written out (as in layer-norm / research LSTMs) so its gates are plain
torch.sigmoid / torch.tanh calls. Chrono initialisation (Tallec & Ollivier, 2018) sets the
forget-gate bias to log(U(1, T - 1)), so many forget gates start, by design, near 1 —
saturated sigmoids that carry the cell state across the 40 time steps. The additive cell
path c_t = f * c_{t-1} + i * g keeps the gradient flowing; clip_grad_norm_ guards against
the occasional spike, as in every LSTM training recipe.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

T, HIDDEN, CLASSES = 40, 48, 4
N, BATCH, STEPS = 2048, 64, 120
FREQS = [1.0, 2.0, 3.0, 4.5]          # cycles per sequence, one per class


def make_data(n):
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, CLASSES, (n,), generator=g)
    t = torch.linspace(0, 1, T)
    phase = 2 * math.pi * torch.rand(n, 1, generator=g)
    freq = torch.tensor(FREQS)[y][:, None]
    signal = torch.sin(2 * math.pi * freq * t[None, :] + phase)
    x = signal + 0.4 * torch.randn(n, T, generator=g)
    return x[:, :, None], y                 # (n, T, 1)


class LSTMCell(nn.Module):
    def __init__(self, inputs, hidden):
        super().__init__()
        self.hidden = hidden
        self.gates = nn.Linear(inputs + hidden, 4 * hidden)
        with torch.no_grad():               # chrono initialisation of the forget gate
            b = self.gates.bias
            b.zero_()
            b[hidden:2 * hidden] = torch.log(torch.empty(hidden).uniform_(1, T - 1))

    def forward(self, x, state):
        h, c = state
        i, f, g, o = self.gates(torch.cat([x, h], dim=1)).chunk(4, dim=1)
        i, f, o = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o)
        g = torch.tanh(g)
        c = f * c + i * g
        h = o * torch.tanh(c)
        return h, c


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = LSTMCell(1, HIDDEN)
        self.out = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], HIDDEN)
        c = x.new_zeros(x.shape[0], HIDDEN)
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
        return self.out(h)


def main(steps=STEPS, verbose=True):
    x, y = make_data(N)
    model = Classifier()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, N, (BATCH,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 20 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.4f}")
    return losses, model


if __name__ == "__main__":
    main()
