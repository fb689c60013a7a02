"""Run: python benchmarks/compile_overhead.py [--quick]   (from the repository root)

    python benchmarks/compile_overhead.py --markdown          # ~2-3 min on one core, after the compile
    python benchmarks/compile_overhead.py --backend none       # the same model, not compiled

What `leaky.audit()` and `leaky.watch()` cost on a torch.compile'd model. The model is a
nanoGPT-shaped character GPT (token and position embeddings, pre-norm blocks of causal
SDPA attention and a GELU MLP, a final LayerNorm, a tied-free linear head; defined here,
synthetic tokens), compiled with the default inductor backend, trained with AdamW.

One model per mode from the same seed: plain, audit (`leaky.audit(steps=None)`), watch
(`leaky.watch(every=DEFAULT_EVERY)`, no store). Each is compiled and warmed up first; then
the modes run interleaved in rounds, each timing a block of steps inside a fresh context:
audit blocks of --steps steps, plain and watch blocks of DEFAULT_EVERY steps (so each watch
block holds exactly one sampled step, in the proportion of a long run). The contexts' exits
are not timed. Reported: the median ms/step over rounds and the median of the per-round
ratios to plain. leaky keeps out of compiled code (leaky/record/compiled.py), so what it
adds is the cost at the compiled module's boundary and the per-step monitor.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F

import leaky
from leaky.watch import DEFAULT_EVERY


class Attention(nn.Module):
    def __init__(self, embd: int, heads: int) -> None:
        super().__init__()
        self.qkv, self.proj, self.heads = nn.Linear(embd, 3 * embd), nn.Linear(embd, embd), heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, embd: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(embd), Attention(embd, heads), nn.LayerNorm(embd)
        self.mlp = nn.Sequential(nn.Linear(embd, 4 * embd), nn.GELU(), nn.Linear(4 * embd, embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, embd: int, heads: int, layers: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, embd), nn.Embedding(block, embd)
        self.blocks = nn.ModuleList(Block(embd, heads) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(embd), nn.Linear(embd, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))   # nanoGPT: loss in forward


class Workload:
    def __init__(self, args: argparse.Namespace) -> None:
        torch.manual_seed(args.seed)
        vocab, block, embd, heads, layers, batch = (65, 32, 64, 2, 2, 4) if args.quick else (65, 64, 128, 4, 4, 8)
        model = GPT(vocab, block, embd, heads, layers)
        self.model = model if args.backend == "none" else torch.compile(model, backend=args.backend)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4)
        self.tokens = torch.randint(0, vocab, (batch, block + 1))

    def step(self) -> None:
        loss = self.model(self.tokens[:, :-1], self.tokens[:, 1:])
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


def context(mode: str):
    if mode == "audit":
        return leaky.audit(steps=None)
    if mode == "watch":
        return leaky.watch(every=DEFAULT_EVERY)
    return contextlib.nullcontext()


def block(work: Workload, mode: str, steps: int) -> float:
    """Seconds per step inside a fresh context (its exit not timed)."""
    with context(mode):
        start = time.perf_counter()
        for _ in range(steps):
            work.step()
        return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller model and 2 rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="steps per audit block")
    parser.add_argument("--backend", default="inductor", help='a torch.compile backend, or "none": not compiled')
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rounds = 2 if args.quick else args.rounds
    modes = ("plain", "audit", "watch")
    works = {mode: Workload(args) for mode in modes}
    for mode in modes:   # compile and warm up
        block(works[mode], mode, 3)
    lengths = {"plain": DEFAULT_EVERY, "audit": args.steps, "watch": DEFAULT_EVERY}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode in modes:
            times[mode].append(block(works[mode], mode, lengths[mode]))
    plain = times["plain"]
    rows = [(mode, statistics.median(times[mode]) * 1e3, statistics.median(t / p for t, p in zip(times[mode], plain)))
            for mode in modes]
    if args.markdown:
        print(f"| mode | ms/step | ratio to plain |   ({args.backend}, {rounds} rounds)\n|---|---:|---:|")
        for mode, ms, ratio in rows:
            print(f"| {mode} | {ms:.2f} | {ratio:.3f}x |")
    else:
        for mode, ms, ratio in rows:
            print(f"{mode:6s} {ms:8.2f} ms/step  {ratio:6.3f}x")


if __name__ == "__main__":
    main()
