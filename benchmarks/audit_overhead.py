"""Run: python benchmarks/audit_overhead.py [--quick]   (from the repository root)

    python benchmarks/audit_overhead.py --threads 1 --markdown        # full run, ~40 s on one core
    python benchmarks/audit_overhead.py --models mlp,cnn --rounds 15 --steps 5

Overhead of `leaky.audit()` on a training step, next to `torch.autograd.detect_anomaly()`.
On a machine whose cores are shared with other work, pass --threads 1: more threads than
free cores make step times swing by several times.

Target: a step under `leaky.audit()` costs at most 2x a plain step (audit ratio <= 2.0).

For each model (MLP, CNN with BatchNorm, LSTM, small Transformer; synthetic data made in
code, sized so that a plain CPU step takes roughly 5-50 ms) one copy is built per mode from
the same seed: plain, audit, anomaly. Each step is zero_grad, forward, loss, backward,
optimizer step. Every mode is warmed up first; then the modes are interleaved in rounds
(plain, audit, anomaly, plain, audit, anomaly, ...) so machine noise hits all of them alike.
In each round a block of K steps is timed per mode with time.perf_counter. The audit mode
enters `leaky.audit(steps=None)` around its block; the steps inside are timed, and the
exit (folding statistics, spectral radii: a one-time cost per audit) is reported in its
own column. Building the report (`audit.report`, lazy) is not timed. The anomaly mode wraps its
block in `torch.autograd.detect_anomaly()` the same way.

Reported per mode: the median over rounds of the per-step time, and the ratio to plain as
the median of the per-round ratios (more robust to a noisy round than a ratio of medians).
If a mode fails on a model, the traceback is printed and that mode is skipped for it.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import leaky  # noqa: E402

from _tables import print_table  # noqa: E402

TARGET_RATIO = 2.0
MODES = ("plain", "audit", "anomaly")


# -- models ---------------------------------------------------------------------------
@dataclass
class Workload:
    """A model, its optimizer, one fixed synthetic batch and the loss to train it on."""
    model: nn.Module
    opt: torch.optim.Optimizer
    inputs: torch.Tensor
    targets: torch.Tensor
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def step(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(self.inputs), self.targets)
        loss.backward()
        self.opt.step()


def build_mlp(quick: bool) -> Workload:
    width, batch, depth = (512, 128, 4) if quick else (1024, 256, 4)
    layers: list[nn.Module] = []
    d_in = 784
    for _ in range(depth - 1):
        layers += [nn.Linear(d_in, width), nn.ReLU()]
        d_in = width
    layers.append(nn.Linear(d_in, 10))
    model = nn.Sequential(*layers)
    x = torch.randn(batch, 784)
    y = torch.randint(0, 10, (batch,))
    return Workload(model, torch.optim.Adam(model.parameters(), lr=1e-3), x, y, nn.functional.cross_entropy)


def build_cnn(quick: bool) -> Workload:
    batch, chans = (32, (16, 32, 64)) if quick else (64, (32, 64, 128))
    blocks: list[nn.Module] = []
    c_in = 3
    for c in chans:
        blocks += [nn.Conv2d(c_in, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2)]
        c_in = c
    model = nn.Sequential(*blocks, nn.Flatten(), nn.Linear(c_in * 4 * 4, 10))   # 32 -> 4 after 3 pools
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))
    return Workload(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), x, y,
                    nn.functional.cross_entropy)


class LSTMRegressor(nn.Module):
    def __init__(self, d_in: int, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(d_in, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1]).squeeze(-1)


def build_lstm(quick: bool) -> Workload:
    hidden, seq, batch, d_in = (128, 32, 16, 32) if quick else (256, 64, 32, 64)
    model = LSTMRegressor(d_in, hidden)
    x = torch.randn(batch, seq, d_in)
    y = torch.randn(batch)
    return Workload(model, torch.optim.Adam(model.parameters(), lr=1e-3), x, y, nn.functional.mse_loss)


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos[: tokens.shape[1]]
        h = self.encoder(h, mask=self.mask, is_causal=True)
        return self.head(self.norm(h))


def build_transformer(quick: bool) -> Workload:
    # Batch 8 and a 256-token vocabulary keep a plain step near 60-130 ms on one or two CPU
    # cores; batch 16 with a 1000-token head is ~3x that.
    vocab, d_model, heads, layers, seq, batch = (256, 128, 4, 2, 64, 8) if quick else (256, 256, 4, 2, 128, 8)
    model = TinyTransformer(vocab, d_model, heads, layers, seq)
    tokens = torch.randint(0, vocab, (batch, seq + 1))

    def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return Workload(model, torch.optim.Adam(model.parameters(), lr=3e-4), tokens[:, :-1], tokens[:, 1:], lm_loss)


BUILDERS: dict[str, Callable[[bool], Workload]] = {
    "mlp": build_mlp, "cnn": build_cnn, "lstm": build_lstm, "transformer": build_transformer,
}


# -- timing ---------------------------------------------------------------------------
def mode_context(mode: str) -> contextlib.AbstractContextManager:
    if mode == "audit":
        return leaky.audit(steps=None)    # exit only: the lazy report is never built here
    if mode == "anomaly":
        return torch.autograd.detect_anomaly()
    return contextlib.nullcontext()


def run_block(work: Workload, mode: str, steps: int) -> tuple[float, float]:
    """(seconds per step inside the context, seconds its exit took).

    The exit is timed apart: for the audit it is a one-time cost per audit (folding the
    statistics, the spectral radius of recurrent weights), not a cost per step.
    """
    context = mode_context(mode)
    context.__enter__()
    try:
        start = time.perf_counter()
        for _ in range(steps):
            work.step()
        per_step = (time.perf_counter() - start) / steps
    finally:
        end = time.perf_counter()
        context.__exit__(None, None, None)
    return per_step, time.perf_counter() - end


@dataclass
class Result:
    model: str
    ms: dict[str, float]          # mode -> median ms/step; missing when the mode failed
    ratio: dict[str, float]       # mode -> median of per-round ratios to plain
    audit_end_ms: float = float("nan")   # one-time cost of leaving the audit (median)


def bench_model(name: str, args: argparse.Namespace) -> Result:
    works: dict[str, Workload] = {}
    for mode in MODES:
        torch.manual_seed(args.seed)
        works[mode] = BUILDERS[name](args.quick)

    live = list(MODES)
    for mode in MODES:                      # warm-up, and find the modes that fail
        try:
            run_block(works[mode], mode, args.warmup)
        except Exception:
            if mode == "plain":
                raise
            print(f"\n[{name}] mode '{mode}' failed during warm-up; skipping it for this model:",
                  file=sys.stderr)
            traceback.print_exc()
            live.remove(mode)

    times: dict[str, list[float]] = {m: [] for m in live}
    ends: dict[str, list[float]] = {m: [] for m in live}
    for _ in range(args.rounds):
        for mode in list(live):
            try:
                per_step, end = run_block(works[mode], mode, args.steps)
                times[mode].append(per_step)
                ends[mode].append(end)
            except Exception:
                if mode == "plain":
                    raise
                print(f"\n[{name}] mode '{mode}' failed; skipping it for this model:", file=sys.stderr)
                traceback.print_exc()
                live.remove(mode)
                times.pop(mode)

    ms = {m: 1e3 * statistics.median(t) for m, t in times.items()}
    ratio = {m: statistics.median(t / p for t, p in zip(times[m], times["plain"])) for m in times}
    end_ms = 1e3 * statistics.median(ends["audit"]) if ends.get("audit") else float("nan")
    return Result(name, ms, ratio, end_ms)


# -- output ---------------------------------------------------------------------------
HEADER = ("model", "plain ms/step", "audit ms/step", "audit ratio", "anomaly ms/step", "anomaly ratio",
          "audit exit ms (once)")


def rows(results: list[Result]) -> list[tuple[str, ...]]:
    def ms(r: Result, m: str) -> str:
        return f"{r.ms[m]:.1f}" if m in r.ms else "skipped"

    def ratio(r: Result, m: str) -> str:
        return f"{r.ratio[m]:.2f}x" if m in r.ratio else "skipped"

    return [(r.model, ms(r, "plain"), ms(r, "audit"), ratio(r, "audit"), ms(r, "anomaly"), ratio(r, "anomaly"),
             f"{r.audit_end_ms:.1f}") for r in results]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(BUILDERS),
                   help=f"comma-separated subset of {','.join(BUILDERS)} (default: all)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 7; 3 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="steps per timed block (default 5; 3 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps per mode (default 3; 2 with --quick)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads(N) (default: leave as is)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="smaller models and fewer rounds, for a smoke run")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = p.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.steps = args.steps or (3 if args.quick else 5)
    args.warmup = args.warmup or (2 if args.quick else 3)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in BUILDERS]
    if unknown or not names:
        p.error(f"unknown model(s) {unknown}; choose from {','.join(BUILDERS)}")
    args.models = names
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    # detect_anomaly warns once per entry that it slows training; that is the point here.
    warnings.filterwarnings("ignore", message=".*[Aa]nomaly [Dd]etection.*")
    print(f"torch {torch.__version__}, leaky {leaky.__version__}, threads {torch.get_num_threads()}, "
          f"rounds {args.rounds}, steps/block {args.steps}{', quick' if args.quick else ''}", flush=True)
    results = []
    for name in args.models:
        t0 = time.perf_counter()
        results.append(bench_model(name, args))
        print(f"  {name}: done in {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    print()
    print_table(HEADER, rows(results), args.markdown)
    over = [r.model for r in results if "audit" in r.ratio and r.ratio["audit"] > TARGET_RATIO]
    if over:
        print(f"\naudit ratio above the {TARGET_RATIO:g}x target: {', '.join(over)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
