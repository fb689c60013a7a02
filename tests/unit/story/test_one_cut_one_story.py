"""LK108: one cut, one story (issue 30).

A `.detach()` in a transformer Block's forward starves the attention and the LayerNorm
before it, in every block the line runs in: nanoGPT with that cut read '6 root causes
(6 errors)', one LK108 per starved module, where the user has one line to change. The
module nearest the cut is the root, names every parameter that line starves (evidence
`cut_parameters`), and the others are told under it; two lines that cut are two stories.
The oracle for what is starved is plain autograd: the parameters whose .grad is None.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.story import stories


class Attention(nn.Module):
    """Causal self-attention written out, as nanoGPT's path without flash attention."""

    def __init__(self, d):
        super().__init__()
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        causal = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
        scores = (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~causal, float("-inf"))
        return self.proj(scores.softmax(-1) @ v)


class MLP(nn.Module):
    """nanoGPT's MLP: the LayerNorm before it is more than a few graph nodes from its output."""

    def __init__(self, d):
        super().__init__()
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d, cut):
        super().__init__()
        self.ln, self.attn, self.cut = nn.LayerNorm(d), Attention(d), cut
        self.ln2, self.mlp = nn.LayerNorm(d), MLP(d)

    def forward(self, x):
        if self.cut:
            x = x + self.attn(self.ln(x)).detach()   # the block's cut
        else:
            x = x + self.attn(self.ln(x))
        return x + self.mlp(self.ln2(x))   # ln2 runs after the block's cut, which does not starve it


class GPTish(nn.Module):
    def __init__(self, cut_blocks: bool, cut_input_of: int | None, d=16, vocab=20):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, cut_blocks) for _ in range(2)])
        self.head = nn.Linear(d, vocab)
        self.cut_input_of = cut_input_of

    def forward(self, idx):
        x = self.emb(idx)
        for i, block in enumerate(self.blocks):
            x = block(x.detach() if i == self.cut_input_of else x)   # the input's cut
        return self.head(x)


def _train(model: nn.Module, steps: int) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        idx = torch.randint(0, 20, (8, 12))
        loss = F.cross_entropy(model(idx)[:, :-1].reshape(-1, 20), idx[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _starved(cut_blocks: bool, cut_input_of: int | None) -> set[str]:
    """Plain autograd: the parameters whose .grad stays None after one backward."""
    torch.manual_seed(0)
    model = GPTish(cut_blocks, cut_input_of)
    idx = torch.randint(0, 20, (8, 12))
    F.cross_entropy(model(idx).reshape(-1, 20), idx.reshape(-1)).backward()
    return {name for name, p in model.named_parameters() if p.grad is None}


def _lk108_stories(cut_blocks: bool, cut_input_of: int | None):
    torch.manual_seed(0)
    model = GPTish(cut_blocks, cut_input_of)
    with leaky.audit(steps=3) as audit:
        _train(model, 3)
    return [(root, rest) for root, rest in stories(list(audit.findings)) if root.code == "LK108"]


def _line(marker: str) -> int:
    text = Path(__file__).read_text().splitlines()
    return next(i for i, row in enumerate(text, 1) if marker in row and "_line(" not in row)


def test_one_detach_in_every_block_is_one_story_naming_every_starved_parameter():
    told = _lk108_stories(cut_blocks=True, cut_input_of=None)
    assert len(told) == 1
    root, rest = told[0]
    assert root.cause.line == _line("# the block's cut")
    assert root.module == "blocks.0.attn.proj"   # the module whose output the .detach() cut
    starved = _starved(cut_blocks=True, cut_input_of=None)
    assert len(starved) == 12   # ln, qkv and proj, weight and bias, in both blocks
    assert set(root.evidence["cut_parameters"]) == starved
    assert root.evidence["cut_values"] == sum(p.numel() for n, p in GPTish(True, None).named_parameters()
                                              if n in starved)
    under = [f for f in rest if f.code == "LK108"]
    assert {f.module for f in under} == {"blocks.0.ln", "blocks.0.attn.qkv", "blocks.1.ln", "blocks.1.attn.qkv",
                                         "blocks.1.attn.proj"}
    assert all(f.cause == root.cause and f.evidence["same_cut_as"] == root.module for f in under)
    # each finding still names its own parameters
    assert {n for f in (root, *under) for n in f.evidence["parameters"]} == starved


def test_a_detach_at_one_blocks_input_is_one_story():
    told = _lk108_stories(cut_blocks=False, cut_input_of=1)
    assert len(told) == 1
    root, rest = told[0]
    assert root.cause.line == _line("# the input's cut")
    assert set(root.evidence["cut_parameters"]) == _starved(cut_blocks=False, cut_input_of=1)
    assert root.module == "blocks.0.mlp.proj"   # the last layer before the cut
    assert {"emb", "blocks.0.ln", "blocks.0.attn.qkv", "blocks.0.attn.proj"} <= {f.module for f in rest}


def test_two_lines_that_cut_are_two_stories():
    told = _lk108_stories(cut_blocks=True, cut_input_of=1)
    lines = {_line("# the block's cut"), _line("# the input's cut")}
    assert {root.cause.line for root, _ in told} == lines and len(told) == 2
    starved = _starved(cut_blocks=True, cut_input_of=1)
    named = [n for root, _ in told for n in root.evidence.get("cut_parameters", root.evidence["parameters"])]
    assert sorted(named) == sorted(starved)   # every starved parameter, each under one line


def test_each_starved_parameter_is_told_under_the_line_that_starves_it():
    """Autograd decides which line: the parameters the Block's cut starves on its own are
    its story, and those only the input's cut adds (the embedding, and block 0's ln2 and
    mlp, which run after the Block's cut) are the input's. On nanoGPT the LayerNorm before
    the MLP was told under the Block's `.detach()`, which leaves it a gradient."""
    block_alone, both = _starved(True, None), _starved(True, 1)
    assert {"emb.weight", "blocks.0.ln2.weight", "blocks.0.mlp.fc.weight"} <= both - block_alone
    expected = {_line("# the block's cut"): block_alone, _line("# the input's cut"): both - block_alone}
    told = _lk108_stories(cut_blocks=True, cut_input_of=1)
    assert {root.cause.line: set(root.evidence.get("cut_parameters", root.evidence["parameters"]))
            for root, _ in told} == expected
    for root, rest in told:   # and each finding, root or told under it, names its own line
        for finding in (root, *rest):
            assert set(finding.evidence["parameters"]) <= expected[finding.cause.line], finding.module


def test_a_cut_that_starves_one_module_is_told_as_before():
    told = _lk108_stories(cut_blocks=False, cut_input_of=0)   # the embedding's output detached
    assert [(root.module, rest) for root, rest in told] == [("emb", [])]
    assert _starved(cut_blocks=False, cut_input_of=0) == {"emb.weight"}
    assert "cut_parameters" not in told[0][0].evidence and "explains" not in told[0][0].evidence


def test_watch_announces_one_line_per_cut_and_keeps_every_finding():
    """A watch's live lines follow the stories: the cut's root is announced, the modules it
    starves are not announced one by one (they were six live ERROR lines on nanoGPT), yet
    each is stored and in the report, and nothing unannounced is called unconfirmed."""
    torch.manual_seed(0)
    model, said = GPTish(True, 1), []
    with leaky.Watch(every=1, on_finding=lambda finding, step: said.append(finding)) as run:
        _train(model, 12)
    cuts = [f for f in run.report.findings if f.code == "LK108"]
    roots = [root for root, _ in stories(list(run.report.findings)) if root.code == "LK108"]
    assert len(cuts) > len(roots) == 2
    assert sorted(f.cause.line for f in said if f.code == "LK108") == \
        sorted({_line("# the block's cut"), _line("# the input's cut")})
    assert run.unconfirmed == []


def test_a_watch_says_how_many_of_the_steps_that_ran_it_checked():
    """`leaky watch` (every 100) over 9 steps read 'leaky: 9 steps observed' above 'received no
    gradient in any of the 1 observed steps': .grad is read parameter by parameter on the
    sampled steps only (here step 0), so the finding counts those, and says of how many."""
    torch.manual_seed(0)
    with leaky.Watch(every=100) as run:
        _train(GPTish(True, None), 9)
    cuts = [f for f in run.report.findings if f.code == "LK108"]
    assert cuts and run.report.run["steps"] == 9 and run.report.run["sampled_steps"] == 1
    for finding in cuts:
        assert (finding.evidence["checked_steps"], finding.evidence["steps_run"]) == (1, 9)
        assert "in the 1 step leaky checked parameter by parameter (of 9 that ran)" in finding.message


class CutBesideUnused(nn.Module):
    def __init__(self, cut: bool):
        super().__init__()
        self.a, self.b, self.never, self.branch, self.cut = nn.Linear(8, 8), nn.Linear(8, 2), nn.Linear(8, 8), \
            nn.Linear(8, 8), cut

    def forward(self, x):
        h = self.a(x).detach() if self.cut else self.a(x)   # the only cut
        self.branch(x)   # its output is never used
        return self.b(h)


def test_a_module_that_no_cut_is_behind_is_not_told_under_one():
    """A module never called and a branch whose output is never used, beside a `.detach()`,
    were told 'the path to the loss is cut by .detach() here' (under the cut's story); without
    the `.detach()` autograd still gives them no gradient: the cut does not starve them."""
    def starved(cut: bool) -> set[str]:
        model = CutBesideUnused(cut)
        F.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 2, (16,))).backward()
        return {name.rsplit(".", 1)[0] for name, p in model.named_parameters() if p.grad is None}

    assert starved(True) - starved(False) == {"a"} and starved(False) == {"never", "branch"}
    torch.manual_seed(0)
    model = CutBesideUnused(True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with leaky.audit(steps=3) as audit:
        for _ in range(3):
            loss = F.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 2, (16,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    told = {f.module: f for f in audit.findings if f.code == "LK108"}
    assert set(told) == starved(True)
    assert told["a"].cause.line == _line("# the only cut") and "explains" not in told["a"].evidence
    assert told["never"].cause is None and "never called" in told["never"].message
    assert told["branch"].cause is None and "never reaches the loss" in told["branch"].message
