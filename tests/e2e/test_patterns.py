"""Training patterns from real scripts: each runs under audit without error, with
bit-identical losses, and with the right step count."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import leaky
from tests.conftest import no_leaky_left

def c_packed():
    emb = nn.Embedding(50, 16); gru = nn.GRU(16, 32, batch_first=True); head = nn.Linear(32, 2)
    ps = list(emb.parameters()) + list(gru.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(ps, 1e-3); out=[]
    for s in range(4):
        x = torch.randint(1, 50, (6, 10)); lens = torch.tensor([10, 9, 7, 5, 3, 2])
        packed = nn.utils.rnn.pack_padded_sequence(emb(x), lens, batch_first=True)
        _, h = gru(packed); loss = F.cross_entropy(head(h[-1]), torch.randint(0, 2, (6,)))
        opt.zero_grad(); loss.backward(); opt.step(); out.append(loss.detach())
    return out

def c_tied_and_eval():
    class LM(nn.Module):
        def __init__(s):
            super().__init__(); s.emb = nn.Embedding(40, 16); s.block = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
            s.head = nn.Linear(16, 40, bias=False); s.head.weight = s.emb.weight
        def forward(s, x):
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
            return s.head(s.block(s.emb(x), src_mask=mask, is_causal=True))
    m = LM(); opt = torch.optim.AdamW(m.parameters(), 1e-3); out = []
    ds = torch.utils.data.TensorDataset(torch.randint(0, 40, (32, 9)))
    for (b,) in torch.utils.data.DataLoader(ds, batch_size=8):
        m.train(); logits = m(b[:, :-1]); loss = F.cross_entropy(logits.reshape(-1, 40), b[:, 1:].reshape(-1))
        opt.zero_grad(); loss.backward(); opt.step(); out.append(loss.detach())
        m.eval()
        with torch.no_grad(): m(b[:, :-1])
    return out

def c_accum_retain():
    m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1)); opt = torch.optim.SGD(m.parameters(), 0.1); out=[]
    for s in range(4):
        opt.zero_grad()
        for k in range(2):
            y = m(torch.randn(8, 4)); l1 = y.mean(); l2 = (y**2).mean()
            l1.backward(retain_graph=True); l2.backward()
        opt.step(); out.append(l2.detach())
    return out

def c_custom_fn_and_inplace():
    class Sq(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x): ctx.save_for_backward(x); return x * x
        @staticmethod
        def backward(ctx, g): (x,) = ctx.saved_tensors; return 2 * x * g
    m = nn.Linear(4, 4); opt = torch.optim.SGD(m.parameters(), 0.01); out=[]
    for s in range(3):
        h = m(torch.randn(5, 4)); h = Sq.apply(h); h = h.clone(); h[:, 0] = 0; h += 1; h.relu_()
        loss = h.sum(); opt.zero_grad(); loss.backward(); opt.step(); out.append(loss.detach())
    return out

def c_gradient_penalty():
    D = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1)); opt = torch.optim.Adam(D.parameters(), 1e-3); out=[]
    for s in range(3):
        x = torch.randn(8, 4, requires_grad=True); d = D(x)
        g, = torch.autograd.grad(d.sum(), x, create_graph=True)
        loss = d.mean() + ((g.norm(dim=1) - 1) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step(); out.append(loss.detach())
    return out

def c_checkpoint():
    blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(3)]); opt = torch.optim.SGD(blocks.parameters(), 0.1); out=[]
    for s in range(3):
        h = torch.randn(4, 8, requires_grad=True)
        for b in blocks: h = checkpoint(b, h, use_reentrant=False)
        loss = h.pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step(); out.append(loss.detach())
    return out

def c_checkpoint_reentrant():
    blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(3)]); opt = torch.optim.SGD(blocks.parameters(), 0.1); out=[]
    for s in range(3):
        h = torch.randn(4, 8, requires_grad=True)
        for b in blocks: h = checkpoint(b, h, use_reentrant=True)
        loss = h.pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step(); out.append(loss.detach())
    return out

def c_mha_sdpa_amp():
    mha = nn.MultiheadAttention(16, 4, batch_first=True); head = nn.Linear(16, 3)
    opt = torch.optim.Adam(list(mha.parameters()) + list(head.parameters()), 1e-3); out=[]
    for s in range(3):
        x = torch.randn(4, 7, 16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a, w = mha(x, x, x, need_weights=True)
            q = F.scaled_dot_product_attention(a, a, a, is_causal=True)
            loss = F.cross_entropy(head(q.mean(1)).float(), torch.randint(0, 3, (4,)))
        opt.zero_grad(); loss.backward(); opt.step(); out.append(loss.detach())
    return out

def c_vmap_func():
    m = nn.Linear(3, 1); opt = torch.optim.SGD(m.parameters(), 0.1); out=[]
    params = dict(m.named_parameters())
    for s in range(2):
        x = torch.randn(5, 3)
        per = torch.func.vmap(lambda xi: torch.func.functional_call(m, params, (xi,)).sum())(x)
        loss = per.mean(); opt.zero_grad(); loss.backward(); opt.step(); out.append(loss.detach())
    return out

def c_double_model_param_groups():
    enc = nn.Linear(4, 8); dec = nn.Linear(8, 4)
    opt = torch.optim.SGD([{"params": enc.parameters(), "lr": 0.1}, {"params": dec.parameters(), "lr": 0.01}]); out=[]
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    for s in range(3):
        x = torch.randn(6, 4); loss = F.mse_loss(dec(torch.sigmoid(enc(x))), x)
        opt.zero_grad(); loss.backward(); opt.step(); sched.step(); out.append(loss.detach())
    return out


CASES = {name[2:]: fn for name, fn in dict(globals()).items() if name.startswith("c_")}
EXPECTED_STEPS = {"packed": 4, "tied_and_eval": 4, "accum_retain": 4, "custom_fn_and_inplace": 3,
                  "gradient_penalty": 3, "checkpoint": 3, "checkpoint_reentrant": 3, "mha_sdpa_amp": 3,
                  "vmap_func": 2, "double_model_param_groups": 3}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pattern_is_observed_without_changing_training(name):
    torch.manual_seed(0)
    plain = CASES[name]()
    torch.manual_seed(0)
    with leaky.audit() as audit:
        seen = CASES[name]()
    assert len(plain) == len(seen)
    assert all(torch.equal(a, b) for a, b in zip(plain, seen))
    assert audit.report.run["steps"] == EXPECTED_STEPS[name]
    assert audit.report.run["internal_error"] is None
    assert no_leaky_left() == []
