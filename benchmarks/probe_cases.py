"""Training scripts for `leaky probe`: healthy models of several kinds, and broken ones.

Each case is the source of a standalone script (synthetic data made in it, seeded, a few
seconds on one CPU thread) and what the probes must say. `benchmarks/probe_calibration.py`
measures the healthy ones to set LK308's threshold; tests/unit/probe/test_probe.py runs some of them
through the command.

    HEALTHY[name] = source      # must pass both probes
    BROKEN[name] = (source, {"LK308": "fail" | "pass", "LK309": ...})
"""
from __future__ import annotations

_HEAD = """\
import sys
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
"""

_CLASSIFY_DATA = """\
teacher = torch.randn(16, 5, generator=gen)


def batch():
    x = torch.randn(64, 16, generator=gen)
    return x, (x @ teacher).argmax(1)
"""

_LOOP = """\
for step in range(STEPS):
    x, y = batch()
    loss = LOSS
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _script(data: str, model: str, optimizer: str, loss: str) -> str:
    return _HEAD + data + model + optimizer + "\n" + _LOOP.replace("LOSS", loss)


MLP = _script(_CLASSIFY_DATA, """\
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
""", "opt = torch.optim.Adam(model.parameters(), lr=1e-3)", "F.cross_entropy(model(x), y)")

SHALLOW_MLP = _script(_CLASSIFY_DATA, """\
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 5))
""", "opt = torch.optim.Adam(model.parameters(), lr=1e-3)", "F.cross_entropy(model(x), y)")

MLP_SGD = _script(_CLASSIFY_DATA, """\
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
""", "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)", "F.cross_entropy(model(x), y)")

NORM_MLP = _script(_CLASSIFY_DATA, """\
model = nn.Sequential(nn.Linear(16, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64), nn.GroupNorm(8, 64),
                      nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 5))
""", "opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)", "F.cross_entropy(model(x), y)")

LABEL_SMOOTHING = _script(_CLASSIFY_DATA, """\
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 5))
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
""", "opt = torch.optim.Adam(model.parameters(), lr=3e-3)", "criterion(model(x), y)")

IMBALANCED = _script("""\
teacher = torch.randn(16, generator=gen)


def batch():
    x = torch.randn(64, 16, generator=gen)
    return x, ((x @ teacher) > 1.6).float()    # about 10% positive
""", """\
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
""", "opt = torch.optim.Adam(model.parameters(), lr=3e-3)",
    "F.binary_cross_entropy_with_logits(model(x).squeeze(1), y)")

_REGRESSION_DATA = """\
teacher = torch.randn(8, 1, generator=gen)
raw = torch.randn(4096, 8, generator=gen)
targets = 50 + 10 * torch.tanh(raw @ teacher) + 0.5 * torch.randn(4096, 1, generator=gen)
mean, std = targets.mean(), targets.std()


def batch():
    rows = torch.randint(0, 4096, (64,), generator=gen)
    return raw[rows], (targets[rows] - mean) / std      # standardised targets
"""
REGRESSION = _script(_REGRESSION_DATA, """\
model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))
""", "opt = torch.optim.Adam(model.parameters(), lr=3e-3)", "F.mse_loss(model(x), y)")

CNN = _script("""\
templates = torch.randn(4, 1, 12, 12, generator=gen)


def batch():
    y = torch.randint(0, 4, (32,), generator=gen)
    x = templates[y] + 0.8 * torch.randn(32, 1, 12, 12, generator=gen)
    return x, y
""", """\
model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
""", "opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)", "F.cross_entropy(model(x), y)")

_SEQUENCE_DATA = """\
def batch():
    x = torch.randn(32, 12, 4, generator=gen)
    return x, (x[:, :, 0].cumsum(1)[:, -1] > 0).long()     # the sign of a running sum
"""

LSTM = _script(_SEQUENCE_DATA, """\
class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 32, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


model = Tagger()
""", "opt = torch.optim.Adam(model.parameters(), lr=3e-3)", "F.cross_entropy(model(x), y)")

GRU = _script(_SEQUENCE_DATA, """\
class Reader(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 32)                       # time first
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        out, h = self.rnn(x.transpose(0, 1))
        return self.head(h[-1])


model = Reader()
""", "opt = torch.optim.Adam(model.parameters(), lr=3e-3)", "F.cross_entropy(model(x), y)")

TRANSFORMER_LM = _HEAD + """\
VOCAB, T = 16, 12
shift = torch.randint(1, VOCAB, (1,), generator=gen).item()


def batch():
    start = torch.randint(0, VOCAB, (32, 1), generator=gen)
    tokens = (start + shift * torch.arange(T + 1)) % VOCAB      # a sequence a model can predict
    return tokens[:, :-1], tokens[:, 1:]


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.pos = nn.Parameter(torch.zeros(T, 32))
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(32, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, ids):
        h = self.embed(ids) + self.pos
        return self.out(self.blocks(h, mask=self.mask, is_causal=True))


model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

""" + _LOOP.replace("LOSS", "F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))")

HEALTHY = {"mlp-adam": MLP, "mlp-adam-shallow": SHALLOW_MLP, "mlp-sgd-momentum": MLP_SGD, "layernorm-groupnorm-mlp": NORM_MLP,
           "label-smoothing": LABEL_SMOOTHING, "imbalanced-bce": IMBALANCED, "regression-standardised": REGRESSION,
           "cnn-batchnorm": CNN, "lstm-batch-first": LSTM, "gru-time-first": GRU, "transformer-lm": TRANSFORMER_LM}

# -- broken --------------------------------------------------------------------------------
_MLP_MODEL = "model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 5))\n"
_ADAM = "opt = torch.optim.Adam(model.parameters(), lr=1e-3)"

DEAD_RELUS = _script(_CLASSIFY_DATA, _MLP_MODEL + """\
with torch.no_grad():
    model[0].bias.fill_(-20.0)                  # every hidden unit starts (and stays) dead
""", _ADAM, "F.cross_entropy(model(x), y)")

SOFTMAX_BEFORE_CE = _script(_CLASSIFY_DATA, """\
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 5), nn.Softmax(dim=1))
""", _ADAM, "F.cross_entropy(model(x), y)")

ROUNDED_OUTPUT = _script(_REGRESSION_DATA, """\
model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))
""", "opt = torch.optim.Adam(model.parameters(), lr=3e-3)", "F.mse_loss(model(x).round(), y)")

FROZEN_BODY = _script(_CLASSIFY_DATA, """\
model = nn.Sequential(nn.Linear(16, 3), nn.ReLU(), nn.Linear(3, 5))
""", "opt = torch.optim.Adam([{'params': model[0].parameters(), 'lr': 0.0},\n"
     "                        {'params': model[2].parameters()}], lr=1e-3)", "F.cross_entropy(model(x), y)")

_OFFSET_MODEL = """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 5))
        self.offset = nn.Parameter(torch.zeros(5))

    def forward(self, x):
        return self.body(x).detach() + self.offset     # only the offset learns


model = Net()
"""
DETACHED_OUTPUT = _script(_CLASSIFY_DATA, _OFFSET_MODEL, _ADAM, "F.cross_entropy(model(x), y)")

_ZEROED_MODEL = """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 5))

    def forward(self, x):
        x = x * 0                                       # the input, overwritten
        return self.body(x)


model = Net()
"""
INPUT_ZEROED = _script(_CLASSIFY_DATA, _ZEROED_MODEL, _ADAM, "F.cross_entropy(model(x), y)")

_BUFFER_MODEL = """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 5))
        self.register_buffer("template", torch.randn(1, 16))

    def forward(self, x):
        return self.body(self.template.expand(x.shape[0], -1))   # a constant in place of x


model = Net()
"""
CONSTANT_BUFFER = _script(_CLASSIFY_DATA, _BUFFER_MODEL, _ADAM, "F.cross_entropy(model(x), y)")

BROKEN = {
    "dead-relus": (DEAD_RELUS, {"LK308": "fail"}),
    "softmax-before-cross-entropy": (SOFTMAX_BEFORE_CE, {"LK308": "fail"}),
    "rounded-output": (ROUNDED_OUTPUT, {"LK308": "fail"}),
    "frozen-body-lr-0": (FROZEN_BODY, {"LK308": "fail"}),
    "detached-output": (DETACHED_OUTPUT, {"LK308": "fail", "LK309": "fail"}),
    # NOTE: a model that ignores its input cannot memorise a batch either: both fail.
    "input-zeroed": (INPUT_ZEROED, {"LK308": "fail", "LK309": "fail"}),
    "constant-buffer": (CONSTANT_BUFFER, {"LK308": "fail", "LK309": "fail"}),
}
