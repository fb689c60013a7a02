"""LK306 batch-mixing on real models, real backward passes and optimizers.

Broken: a view where a transpose was meant in front of a time-major LSTM, a softmax over
dim 0, a norm over the batch, a flatten after a permute that moved the batch, attention
over the batch (nn.MultiheadAttention without batch_first on batch-first data), mixing
after a token embedding. Each must be found at the op and line where the mixing starts.
Healthy look-alikes: a BatchNorm CNN with dropout (probed in eval mode), a batch_first
LSTM, a time-major LSTM fed through a transpose, LayerNorm and GroupNorm, a transformer
with batch_first=True, an InfoNCE encoder and a CLIP-style model whose output is the
in-batch similarity matrix, a char LM; mixing by design: a GCN given its adjacency, batch
norm without running statistics (no finding), a capacity-routed mixture of experts (info).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.finding import Severity

HERE = Path(__file__)
B, T, D = 8, 5, 6


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(HERE.read_text().splitlines(), 1)
                if text.rstrip().endswith(f"# {marker}"))


def _audit(model, batch, loss_of, steps: int = 3, lr: float = 1e-2):
    """A plain loop over fresh batches; `batch(step)` gives the model's input(s)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    with leaky.audit(steps=steps) as audit:
        for step in range(steps):
            inputs = batch(step)
            out = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
            loss = loss_of(out)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit.report


def _lk306(report):
    return report.by_code("LK306")


def _classes(out):
    gen = torch.Generator().manual_seed(1)
    return F.cross_entropy(out, torch.randint(0, out.shape[-1], out.shape[:1], generator=gen))


def _seq(step):
    return torch.randn(B, T, 3, generator=torch.Generator().manual_seed(step))


def _flat(step):
    return torch.randn(B, D, generator=torch.Generator().manual_seed(step))


# -- broken -------------------------------------------------------------------------------
class ViewForTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 16)      # time-major
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        b, t, f = x.shape
        h, _ = self.rnn(x.view(t, b, f))   # VIEW-FOR-TRANSPOSE
        return self.head(h[-1])


class SoftmaxOverBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.softmax(self.a(x), dim=0))   # SOFTMAX-DIM-0


class NormOverBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = self.a(x)
        h = (h - h.mean(0)) / (h.std(0) + 1e-5)   # NORM-OVER-BATCH
        return self.b(torch.relu(h))


class FlattenAfterPermute(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3, padding=1)
        self.head = nn.Linear(4 * T, 4)

    def forward(self, x):                   # x: (B, T, 3)
        h = self.conv(x.transpose(1, 2))    # (B, 4, T)
        h = h.permute(1, 0, 2).reshape(x.shape[0], -1)   # FLATTEN-AFTER-PERMUTE
        return self.head(h)


class AttentionOverBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 8)
        self.attn = nn.MultiheadAttention(8, 2)   # expects (T, B, E); gets (B, T, E)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = self.proj(x)
        h, _ = self.attn(h, h, h)   # ATTENTION-OVER-BATCH
        return self.head(h.mean(1))


@pytest.mark.parametrize("model, batch, marker, op", [
    (ViewForTranspose, _seq, "VIEW-FOR-TRANSPOSE", "view"),
    (SoftmaxOverBatch, _flat, "SOFTMAX-DIM-0", "softmax"),
    (NormOverBatch, _flat, "NORM-OVER-BATCH", None),
    (FlattenAfterPermute, _seq, "FLATTEN-AFTER-PERMUTE", "reshape"),
    (AttentionOverBatch, _seq, "ATTENTION-OVER-BATCH", None),
], ids=["view-for-transpose", "softmax-dim-0", "norm-over-batch", "flatten-after-permute", "attention-over-batch"])
def test_mixing_is_found_where_it_starts(model, batch, marker, op):
    torch.manual_seed(0)
    report = _audit(model(), batch, _classes)
    (finding,) = _lk306(report)
    assert finding.severity is Severity.ERROR
    assert finding.source.line == _line(marker) and finding.cause.line == _line(marker)
    if op is not None:
        assert finding.op == op
    ev = finding.evidence
    assert ev["batch"] == B and 1 <= ev["samples_reached"] <= B - 1
    assert f"batch of {B}" in finding.message


def test_the_fix_follows_the_op():
    torch.manual_seed(0)
    (view,) = _lk306(_audit(ViewForTranspose(), _seq, _classes))
    assert "transpose" in view.fix
    (softmax,) = _lk306(_audit(SoftmaxOverBatch(), _flat, _classes))
    assert "dim=-1" in softmax.fix and "not over dim 0" in softmax.fix
    (attention,) = _lk306(_audit(AttentionOverBatch(), _seq, _classes))
    assert attention.module == "attn"


class TokensMixed(nn.Module):
    """Token ids in: the embedding's output stands in for them."""

    def __init__(self, vocab=20):
        super().__init__()
        self.emb = nn.Embedding(vocab, 8)
        self.head = nn.Linear(8, vocab)

    def forward(self, idx):
        h = self.emb(idx)
        h = h - h.mean(0, keepdim=True)   # TOKENS-MIXED
        return self.head(h)


class TokensKept(TokensMixed):
    def forward(self, idx):
        h = self.emb(idx)
        return self.head(h - h.mean(1, keepdim=True))   # over the sequence of one sample: fine


def _tokens(step):
    return torch.randint(0, 20, (B, T), generator=torch.Generator().manual_seed(step))


def _lm_loss(out):
    target = torch.randint(0, out.shape[-1], out.shape[:2], generator=torch.Generator().manual_seed(2))
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


def test_token_ids_are_probed_through_their_embedding():
    torch.manual_seed(0)
    (finding,) = _lk306(_audit(TokensMixed(), _tokens, _lm_loss))
    assert finding.source.line == _line("TOKENS-MIXED")
    assert "embedding emb" in finding.evidence["differentiated"]
    report = _audit(TokensKept(), _tokens, _lm_loss)
    assert not _lk306(report)
    (probe,) = report.batch_probes
    assert probe["judged"] and not probe["mixed"] and "embedding emb" in probe["differentiated"]


# -- healthy look-alikes ----------------------------------------------------------------------
class BatchNormCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Dropout(0.2),
                                  nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

    def forward(self, x):
        return self.body(x)


class LSTMBatchFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 16, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h, _ = self.rnn(x)
        return self.head(h[:, -1])


class LSTMTimeMajor(ViewForTranspose):
    def forward(self, x):
        h, _ = self.rnn(x.transpose(0, 1))
        return self.head(h[-1])


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.ln = nn.Linear(D, 16), nn.LayerNorm(16)
        self.gn, self.b = nn.GroupNorm(4, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.relu(self.gn(self.ln(self.a(x)))))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.enc(self.proj(x)).mean(1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(D, 32), nn.ReLU(), nn.Linear(32, 16))

    def forward(self, x):
        return F.normalize(self.net(x), dim=-1)


def _info_nce(z):
    """In-batch negatives: two views are (z[:B/2], z[B/2:]); the loss mixes, the encoder does not."""
    a, b = z.chunk(2)
    logits = a @ b.T / 0.1
    return F.cross_entropy(logits, torch.arange(len(a)))


class CLIPLike(nn.Module):
    """The model itself returns the in-batch similarity matrix (B, B)."""

    def __init__(self):
        super().__init__()
        self.image, self.text = nn.Linear(D, 16), nn.Linear(D, 16)

    def forward(self, images, texts):
        return F.normalize(self.image(images), dim=-1) @ F.normalize(self.text(texts), dim=-1).T / 0.07


def _pairs(step):
    gen = torch.Generator().manual_seed(step)
    return torch.randn(B, D, generator=gen), torch.randn(B, D, generator=gen)


def _clip_loss(logits):
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


@pytest.mark.parametrize("model, batch, loss_of", [
    (BatchNormCNN, lambda s: torch.randn(B, 3, 8, 8, generator=torch.Generator().manual_seed(s)), _classes),
    (LSTMBatchFirst, _seq, _classes),
    (LSTMTimeMajor, _seq, _classes),
    (Norms, _flat, _classes),
    (Transformer, _seq, _classes),
    (Encoder, _flat, _info_nce),
    (CLIPLike, _pairs, _clip_loss),
], ids=["batchnorm-cnn", "lstm-batch-first", "lstm-time-major-transposed", "layernorm-groupnorm",
        "transformer-batch-first", "info-nce-encoder", "clip-similarity-matrix"])
def test_per_sample_models_are_quiet(model, batch, loss_of):
    torch.manual_seed(0)
    report = _audit(model(), batch, loss_of)
    assert not _lk306(report)
    (probe,) = report.batch_probes
    assert probe["judged"] and not probe["mixed"], probe


def test_batch_norm_is_probed_in_eval_mode_and_says_so():
    torch.manual_seed(0)
    model = BatchNormCNN()
    report = _audit(model, lambda s: torch.randn(B, 3, 8, 8, generator=torch.Generator().manual_seed(s)), _classes)
    (probe,) = report.batch_probes
    assert probe["batchnorm_eval"] == ["body.1", "body.5"]
    assert model.training and all(m.training for m in model.modules())


# -- mixing by design -----------------------------------------------------------------------
class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.w2 = nn.Linear(D, 16), nn.Linear(16, 4)

    def forward(self, x, adj):
        h = torch.relu(adj @ self.w1(x))
        return adj @ self.w2(h)


def _graph(step):
    gen = torch.Generator().manual_seed(step)
    a = (torch.rand(B, B, generator=gen) < 0.3).float() + torch.eye(B)
    a = a / a.sum(1, keepdim=True)
    return torch.randn(B, D, generator=gen), a


class GATLike(nn.Module):
    """Attention over the nodes, masked by the adjacency: the scores mix before the mask."""

    def __init__(self):
        super().__init__()
        self.w, self.a_src, self.a_dst, self.head = nn.Linear(D, 16), nn.Linear(16, 1), nn.Linear(16, 1), nn.Linear(16, 4)

    def forward(self, x, adj):
        h = self.w(x)
        e = F.leaky_relu(self.a_src(h) + self.a_dst(h).T)          # (N, N), before any mask
        attention = torch.softmax(torch.where(adj > 0, e, torch.full_like(e, -1e9)), dim=-1)
        return self.head(attention @ h)


class EdgeListGNN(nn.Module):
    """Message passing over an edge list (2, E), as torch_geometric's layers take it."""

    def __init__(self):
        super().__init__()
        self.msg, self.head = nn.Linear(D, 16), nn.Linear(16, 4)

    def forward(self, x, edge_index):
        m = self.msg(x)
        agg = torch.zeros_like(m).index_add(0, edge_index[1], m[edge_index[0]])
        return self.head(torch.relu(agg + m))


def _edges(step):
    x, a = _graph(step)
    return x, a.nonzero().T.contiguous()


class BatchStatsOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.bn, self.b = nn.Linear(D, 16), nn.BatchNorm1d(16, track_running_stats=False), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.relu(self.bn(self.a(x))))


def test_a_graph_given_as_input_and_batch_statistics_are_mixing_by_design():
    """A GCN's adj @ h, a GAT's scores over all node pairs, an edge list's index_add; and
    batch norm that has only the batch's statistics."""
    torch.manual_seed(0)
    report = _audit(GCN(), _graph, _classes)
    assert not _lk306(report)
    (probe,) = report.batch_probes
    assert probe["mixed"] and probe["by_design"] == "graph-message-passing"
    for model, batch in ((GATLike(), _graph), (EdgeListGNN(), _edges)):
        report = _audit(model, batch, _classes)
        assert not _lk306(report)
        (probe,) = report.batch_probes
        assert probe["mixed"] and probe["by_design"] == "graph-message-passing", probe
    report = _audit(BatchStatsOnly(), _flat, _classes)
    assert not _lk306(report)
    (probe,) = report.batch_probes
    assert probe["mixed"] and probe["by_design"] == "batch-norm-without-running-statistics"


class MoERouter(nn.Module):
    """Expert choice: each expert takes its top-k tokens of the whole batch (capacity)."""

    def __init__(self, experts=2, capacity=4):
        super().__init__()
        self.gate = nn.Linear(D, experts)
        self.experts = nn.ModuleList(nn.Linear(D, D) for _ in range(experts))
        self.capacity = capacity

    def forward(self, x):
        scores = torch.softmax(self.gate(x), dim=0)     # over the tokens, per expert
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            weight, chosen = scores[:, e].topk(self.capacity)
            out = out.index_add(0, chosen, weight[:, None] * expert(x[chosen]))
        return out


class MoEModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.moe, self.head = MoERouter(), nn.Linear(D, 4)

    def forward(self, x):
        return self.head(x + self.moe(x))


def test_a_capacity_routed_mixture_of_experts_is_named_as_such():
    torch.manual_seed(0)
    (finding,) = _lk306(_audit(MoEModel(), _flat, _classes))
    assert finding.severity is Severity.INFO and finding.module == "moe"
    assert "By design" in finding.message and finding.evidence["by_design"] == "mixture-of-experts-routing"


# -- the probe changes nothing ---------------------------------------------------------------
@pytest.mark.parametrize("factory", [BatchNormCNN, ViewForTranspose, Transformer], ids=["batchnorm-dropout", "mixing",
                                                                                     "transformer-dropout"])
def test_the_probe_leaves_training_bit_identical(factory):
    shape = (B, 3, 8, 8) if factory is BatchNormCNN else (B, T, 3)

    def run(audited):
        torch.manual_seed(3)
        model = factory()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        losses = []
        ctx = leaky.audit(steps=3) if audited else None
        with ctx if ctx is not None else torch.enable_grad():
            for _ in range(3):
                loss = _classes(model(torch.randn(*shape)))
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.detach().clone())
        after = torch.rand(1)   # the random stream continues where it would have
        return losses, {k: v.clone() for k, v in model.state_dict().items()}, after, ctx

    plain_losses, plain_state, plain_next, _ = run(False)
    seen_losses, seen_state, seen_next, ctx = run(True)
    assert ctx.report.batch_probes and ctx.report.batch_probes[0]["judged"]
    assert all(torch.equal(a, b) for a, b in zip(plain_losses, seen_losses))
    assert all(torch.equal(plain_state[k], seen_state[k]) for k in plain_state)
    assert torch.equal(plain_next, seen_next)


def test_probed_once_per_model_and_not_in_evaluation():
    torch.manual_seed(0)
    model = Norms()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []
    model.a.register_forward_hook(lambda m, i, o: calls.append(1))
    with leaky.audit(steps=3) as audit:
        with torch.no_grad():
            model(_flat(9))            # an evaluation first: not probed
        for step in range(3):
            loss = _classes(model(_flat(step)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert len(audit.report.batch_probes) == 1
    assert len(calls) == 1 + 3        # the probe ran, without the user's hooks


class Counting(SoftmaxOverBatch):
    """A forward with side effects: a call counter, a list it appends to, a cached tensor."""

    def __init__(self):
        super().__init__()
        self.calls, self.seen, self.last = 0, [], None

    def forward(self, x):
        self.calls += 1
        self.seen.append(x.shape[0])
        out = super().forward(x)
        self.last = out
        return out


def test_the_users_hooks_and_forward_side_effects_are_untouched():
    torch.manual_seed(0)
    model = Counting()
    kept = []
    model.b.register_forward_hook(lambda m, i, o: kept.append(o))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with leaky.audit(steps=2) as audit:
        for step in range(2):
            out = model(_flat(step))
            loss = _classes(out)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert audit.report.batch_probes[0]["mixed"]     # probed twice over: to judge and to locate
    assert (model.calls, model.seen, len(kept)) == (2, [B, B], 2)
    assert model.last is out and kept[-1] is out


def test_probe_can_be_turned_off():
    torch.manual_seed(0)
    config = leaky.AuditConfig(batch_probe=False)
    opt_model = SoftmaxOverBatch()
    opt = torch.optim.SGD(opt_model.parameters(), lr=0.1)
    with leaky.audit(steps=2, config=config) as audit:
        for step in range(2):
            loss = _classes(opt_model(_flat(step)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not audit.report.batch_probes and not _lk306(audit.report)


def test_attention_over_the_batch_names_batch_first():
    torch.manual_seed(0)
    (finding,) = _lk306(_audit(AttentionOverBatch(), _seq, _classes))
    assert finding.module == "attn" and "batch_first=True" in finding.fix


class HandWrittenTimeMajorRNN(nn.Module):
    """Karpathy-style: inputs (T, B, V), a loop over t; dim 0 is time, not the batch."""

    def __init__(self, vocab=12, hidden=16):
        super().__init__()
        self.w_xh, self.w_hh = nn.Parameter(torch.randn(vocab, hidden) * 0.3), nn.Parameter(torch.eye(hidden) * 0.5)
        self.w_hy = nn.Parameter(torch.randn(hidden, vocab) * 0.3)

    def forward(self, inputs):
        h = inputs.new_zeros(inputs.shape[1], self.w_hh.shape[0])
        out = []
        for t in range(inputs.shape[0]):
            h = torch.tanh(inputs[t] @ self.w_xh + h @ self.w_hh)
            out.append(h @ self.w_hy)
        return torch.stack(out)


class HandWrittenTimeMajorMixed(HandWrittenTimeMajorRNN):
    def forward(self, inputs):
        return super().forward(inputs - inputs.mean(1, keepdim=True))   # TIME-MAJOR-MIXED


def _one_hot_seq(step):
    ids = torch.randint(0, 12, (T + 4, B), generator=torch.Generator().manual_seed(step))
    return F.one_hot(ids, 12).float()


def _seq_loss(out):
    return out.pow(2).mean()


def test_a_hand_written_time_major_recurrence_is_read_as_time_by_its_causal_dim_0():
    torch.manual_seed(0)
    report = _audit(HandWrittenTimeMajorRNN(), _one_hot_seq, _seq_loss)
    assert not _lk306(report)
    (probe,) = report.batch_probes
    assert probe["judged"] and not probe["mixed"] and probe["batch"] == B, probe
    (finding,) = _lk306(_audit(HandWrittenTimeMajorMixed(), _one_hot_seq, _seq_loss))
    assert finding.source.line == _line("TIME-MAJOR-MIXED") and finding.evidence["batch"] == B
