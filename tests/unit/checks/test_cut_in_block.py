"""LK108 in a transformer block: `x = x + self.attn(self.ln(x)).detach()` starves the
attention and the LayerNorm before it; each is found at that line.

Two faults were in the way. LK306's batch probe copies the model call's inputs from inside
a module hook with `.detach().clone()`, and leaky's own op mode recorded that as the user's
cut at the model's call line (a healthy program had two '.detach()' cuts at
`logits = head(block(emb(idx)))`, and the LayerNorm's finding named that line). And a cut's
producers are followed a few autograd nodes back, which an attention is deeper than: the
LayerNorm was said to be 'an unused branch'."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.cli import main

BLOCK = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = (t.unsqueeze(1) for t in self.qkv(x).split(x.size(-1), dim=-1))
        return self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).squeeze(1))


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = Attention(d)
        self.mlp = nn.Linear(d, d)

    def forward(self, x):
        x = x + self.attn(self.ln(x)).detach()  # MARK: cut
        return x + self.mlp(x)


emb, block, head = nn.Embedding(20, 16), Block(16), nn.Linear(16, 20)
opt = torch.optim.Adam([*emb.parameters(), *block.parameters(), *head.parameters()], lr=1e-3)
for step in range(5):
    idx = torch.randint(0, 20, (8, 12))
    logits = head(block(emb(idx)))
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 20), idx[:, 1:].reshape(-1))
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_every_module_the_cut_starves_is_found_at_the_cut(tmp_path: Path):
    text = textwrap.dedent(BLOCK).lstrip("\n")
    script = tmp_path / "train.py"
    script.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "# MARK: cut" in row)
    out = tmp_path / "report.json"
    main(["audit", "--no-table", "--json", str(out), str(script)])
    found = {f["module"]: f for f in json.loads(out.read_text())["findings"] if f["code"] == "LK108"}
    assert set(found) == {"block.ln", "block.attn.qkv", "block.attn.proj"}
    for finding in found.values():
        assert finding["cause"] == {"file": str(script), "line": line, "what": "the gradient path cut here by .detach()"}


def test_the_batch_probe_copies_inputs_without_recording_a_cut():
    # three models in a chain: the second and third are called on outputs that need a gradient
    torch.manual_seed(0)
    emb, body, head = nn.Embedding(20, 16), nn.Sequential(nn.Linear(16, 16), nn.ReLU()), nn.Linear(16, 20)
    opt = torch.optim.Adam([*emb.parameters(), *body.parameters(), *head.parameters()], lr=1e-3)
    with leaky.audit(steps=3) as audit:
        for step in range(3):
            idx = torch.randint(0, 20, (8, 12))
            loss = F.cross_entropy(head(body(emb(idx)))[:, :-1].reshape(-1, 20), idx[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert audit.stats.cuts == ()
