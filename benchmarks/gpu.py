"""Run: python benchmarks/gpu.py [--quick]   (from the repository root; one CUDA GPU)

    python benchmarks/gpu.py --markdown          # on a CUDA machine: ~3-5 min
    python benchmarks/gpu.py --quick             # smaller models, 2 rounds: a smoke run
    python benchmarks/gpu.py                     # without CUDA: says what it skipped, runs a CPU smoke

What leaky costs on a GPU, on two models built here (synthetic data, no downloads):

  gpt     a nanoGPT-sized character GPT (nanoGPT's shakespeare-char configuration: 6 layers,
          6 heads, d_model 384, 256 tokens, batch 64, vocabulary 65, dropout 0.2; pre-norm
          blocks, causal scaled_dot_product_attention, tied LM head), AdamW
  resnet  a CIFAR ResNet-18 (BasicBlocks [2, 2, 2, 2], widths 64-512, 32x32 images, batch
          128, BatchNorm), SGD with momentum; written here, as torchvision's wheel does not
          load on the project's machine

Modes (benchmarks/_modes.py), each in its own worker process (benchmarks/_harness.py,
spawned: a forked process cannot use CUDA; fresh workers per model; interleaved rounds):
plain; audit (leaky.audit(steps=None) entered around each timed block, as overhead.py);
audit-held (one audit open across all timed steps: steady state); watch-default
(leaky.watch(every=DEFAULT_EVERY) with a store, blocks of DEFAULT_EVERY steps, so each holds
exactly one sampled step: the ratio is what a long run pays); watch-every-1; plain-b (plain
again: the A/A control). Both watches first take depth_sweep.SETTLE_STEPS untimed steps
(past the early steps' probes). Every step ends with torch.cuda.synchronize(), so a step's
time is its whole time on the device; TF32 matmuls on, as nanoGPT.

Reported per model and mode: median ms/step and the median per-round ratio to plain; the
extra µs per unsampled watch step; the peak of torch.cuda.max_memory_allocated over the
mode's warm-up and timed steps (reset after the model is built) and its ratio to plain's;
then the sync check; then the overhead budget's figures (benchmarks/budget.py on gpt and
resnet: whole runs of leaky.watch() at its default --overhead 2% against plain runs, the share
the watch measured itself and the sampling it chose).

The sync check (run in each worker after its rounds): leaky means to copy a step's device
values to the host once, at the step's end: StepBuffer.flush (a sampled step's values) and
StepMonitor.flush (the loss and total-norm series, batched by a watch; an audit copies them in
its StepBuffer.flush, so StepMonitor.flush counts 0 there). Those two
are exempted (each call runs with the sync debug mode off, and is counted); around the
rest of the step torch.cuda.set_sync_debug_mode("warn") reports every other synchronising
CUDA call as a warning, which is counted with its Python file:line. Counted: 2 first steps
(for audit: the first of a fresh audit, whose once-per-audit probes may sync), then 3 steady
steps; then one step under set_sync_debug_mode("error"), which says whether anything raised
(or made leaky stop with an internal error). plain is the control: the workload's own syncs.

Without CUDA the script says "no CUDA device: skipped ..." for each CUDA part and runs the
same code paths on the CPU at smoke sizes (1-layer GPT, 4-block ResNet of width 8), so that
CI can check it imports and starts (tests/e2e/test_benchmarks_start.py).
"""
from __future__ import annotations

import contextlib
import functools
import gc
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from functools import partial

# NOTE: before torch is imported: torch.cuda.is_available() then asks NVML and does not
# initialise CUDA in the main process (the workers are spawned anyway).
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import leaky  # noqa: E402
from leaky.record.monitor import StepMonitor  # noqa: E402
from leaky.record.step_record import StepBuffer  # noqa: E402
from leaky.watch import DEFAULT_EVERY  # noqa: E402

from _harness import (Plan, WorkerOptions, bracketing_reference, mean, parse, parser, time_model,  # noqa: E402
                      worker_pool)
from _modes import AuditRunner, HeldAuditRunner, Runner  # noqa: E402
from _tables import print_notes, print_table  # noqa: E402
from audit_overhead import Workload  # noqa: E402
from depth_sweep import SettledWatch, graph_nodes  # noqa: E402

MODES = ("plain", "audit", "audit-held", "watch-default", "watch-every-1", "plain-b")
MODELS = ["gpt", "resnet"]
ROUNDS = (5, 2)                     # default rounds: full, --quick
FIRST_STEPS, STEADY_STEPS = 2, 3    # steps of the sync check
CUDA = torch.cuda.is_available()


# -- a nanoGPT-sized GPT ------------------------------------------------------------------
@dataclass
class GPTConfig:
    vocab: int = 65          # characters (nanoGPT's shakespeare_char)
    block_size: int = 256    # tokens per sample
    n_layer: int = 6         # transformer blocks
    n_head: int = 6          # attention heads
    n_embd: int = 384        # model width
    dropout: float = 0.2     # on attention weights, residual branches and embeddings
    batch: int = 64          # samples per step


class CausalSelfAttention(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.qkv, self.proj = nn.Linear(c.n_embd, 3 * c.n_embd), nn.Linear(c.n_embd, c.n_embd)
        self.heads, self.dropout = c.n_head, c.dropout
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.drop(self.proj(y.transpose(1, 2).reshape(b, t, d)))


class Block(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(c.n_embd), CausalSelfAttention(c), nn.LayerNorm(c.n_embd)
        self.mlp = nn.Sequential(nn.Linear(c.n_embd, 4 * c.n_embd), nn.GELU(), nn.Linear(4 * c.n_embd, c.n_embd),
                                 nn.Dropout(c.dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(c.vocab, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.Sequential(*[Block(c) for _ in range(c.n_layer)])
        self.norm = nn.LayerNorm(c.n_embd)
        self.head = nn.Linear(c.n_embd, c.vocab, bias=False)
        self.head.weight = self.tok.weight          # tied, as nanoGPT

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.head(self.norm(self.blocks(self.drop(self.tok(tokens) + self.pos(positions)))))


# -- a CIFAR ResNet-18 --------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out)
        self.conv2, self.bn2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out)
        self.short = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.short = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNet(nn.Module):
    def __init__(self, blocks: tuple[int, ...] = (2, 2, 2, 2), width: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, c_in = [], width
        for stage, n in enumerate(blocks):
            c_out = width * 2 ** stage
            for i in range(n):
                layers.append(BasicBlock(c_in, c_out, 2 if stage and i == 0 else 1))
                c_in = c_out
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


# -- the workloads --------------------------------------------------------------------------
@dataclass
class DeviceWorkload(Workload):
    """A Workload whose step waits for the device (unless `wait` is off: the sync check)."""
    wait: bool = True

    def step(self) -> None:
        super().step()
        if self.wait and self.inputs.is_cuda:
            torch.cuda.synchronize()


def build_gpt(device: str, smoke: bool) -> DeviceWorkload:
    c = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=32, batch=4) if smoke else GPTConfig()
    model = GPT(c).to(device)
    tokens = torch.randint(0, c.vocab, (c.batch, c.block_size + 1), device=device)

    def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    return DeviceWorkload(model, opt, tokens[:, :-1], tokens[:, 1:], lm_loss)


def build_resnet(device: str, smoke: bool) -> DeviceWorkload:
    blocks, width, batch, size = ((1, 1, 1, 1), 8, 4, 16) if smoke else ((2, 2, 2, 2), 64, 128, 32)
    model = ResNet(blocks, width).to(device)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return DeviceWorkload(model, opt, x, y, F.cross_entropy)


BUILDERS = {"gpt": build_gpt, "resnet": build_resnet}


# -- the sync check ---------------------------------------------------------------------------
FLUSHES = {"buffer": (StepBuffer, "flush"), "series": (StepMonitor, "flush")}


@contextlib.contextmanager
def exempt_flushes(cuda: bool):
    """leaky's once-per-step host copies run with the sync debug mode off, and are counted."""
    counts: Counter = Counter()

    def exempt(label: str, original):
        @functools.wraps(original)
        def flush(*args, **kwargs):
            counts[label] += 1
            if not cuda:
                return original(*args, **kwargs)
            mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode(0)
            try:
                return original(*args, **kwargs)
            finally:
                torch.cuda.set_sync_debug_mode(mode)
        return flush

    originals = {label: getattr(owner, name) for label, (owner, name) in FLUSHES.items()}
    try:
        for label, (owner, name) in FLUSHES.items():
            setattr(owner, name, exempt(label, originals[label]))
        yield counts
    finally:
        for label, (owner, name) in FLUSHES.items():
            setattr(owner, name, originals[label])


def _where(w: warnings.WarningMessage) -> str:
    parts = w.filename.replace(os.sep, "/").split("/")
    return f"{'/'.join(parts[-2:])}:{w.lineno}"


def count_syncs(runner: Runner, steps: int, cuda: bool, flushes: Counter) -> dict:
    """`steps` steps with the sync debug mode at "warn": the synchronising calls outside the
    exempted flushes (count and where), the flushes, the sampled steps."""
    before = dict(flushes)
    sampled = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                sampled += runner.step()
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
                torch.cuda.synchronize()
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    return {"steps": steps, "syncs": len(syncs), "where": Counter(map(_where, syncs)).most_common(3),
            "flushes": {k: flushes[k] - before.get(k, 0) for k in FLUSHES}, "sampled": sampled}


def error_step(runner: Runner, recorder) -> str:
    """One step with the sync debug mode at "error": what happened."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        runner.step()
        outcome = "no error"
    except Exception as exc:     # a sync in the user's code path, or a leaky hook not guarded
        outcome = f"raised {type(exc).__name__}: {str(exc).strip().splitlines()[0][:100]}"
    finally:
        torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
    if recorder is not None and recorder.error:
        outcome += f"; leaky stopped: {recorder.error[:100]}"
    return outcome


def sync_check(runner: Runner, cuda: bool) -> dict:
    """The check of the module docstring; in the worker, after the rounds."""
    runner.work.wait = False
    try:
        with runner.context() as context, exempt_flushes(cuda) as flushes:
            recorder = getattr(context, "recorder", None) or getattr(getattr(runner, "run", None), "recorder", None)
            recorder = recorder or getattr(getattr(runner, "audit", None), "recorder", None)
            first = count_syncs(runner, FIRST_STEPS, cuda, flushes)
            steady = count_syncs(runner, STEADY_STEPS, cuda, flushes)
            error = error_step(runner, recorder) if cuda else "not run (no CUDA)"
    finally:
        runner.work.wait = True
    return {"first": first, "steady": steady, "error_mode": error}


# -- the runners: memory and the sync check around _modes' ---------------------------------
class OnDevice:
    """Mixed in before a _modes runner: peak device memory over the mode's steps, the graph's
    nodes (plain), and the sync check, all reported when the mode closes."""

    def setup(self) -> None:
        if self.work.inputs.is_cuda:
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        super().setup()

    def close(self) -> dict:
        cuda = self.work.inputs.is_cuda
        info = {"peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan"),
                "device": torch.cuda.get_device_name() if cuda else "cpu"}
        if self.model_mode == "plain":
            self.work.opt.zero_grad(set_to_none=True)
            info.update(graph_nodes(self.work.loss_fn(self.work.model(self.work.inputs), self.work.targets)))
        info["sync"] = sync_check(self, cuda)
        return {**info, **super().close()}


def _on_device(kind, mode: str):
    name = getattr(kind, "__name__", None) or kind.func.__name__
    base = kind.func if isinstance(kind, partial) else kind
    made = type(f"OnDevice{name}", (OnDevice, base), {"model_mode": mode})
    return partial(made, **kind.keywords) if isinstance(kind, partial) else made


RUNNER = {"plain": _on_device(Runner, "plain"), "plain-b": _on_device(Runner, "plain-b"),
          "audit": _on_device(AuditRunner, "audit"), "audit-held": _on_device(HeldAuditRunner, "audit-held"),
          "watch-default": _on_device(partial(SettledWatch, every=DEFAULT_EVERY), "watch-default"),
          "watch-every-1": _on_device(partial(SettledWatch, every=1), "watch-every-1")}


def make_runner(mode: str, model: str, options: WorkerOptions) -> Runner:
    """Builds on the GPU when there is one, at smoke sizes on the CPU or with --quick."""
    torch.manual_seed(options.seed)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return RUNNER[mode](BUILDERS[model](device, options.quick or device == "cpu"), model, options)


# -- one model, summarized ------------------------------------------------------------------
@dataclass
class ModeRow:
    ms: float                 # median block mean, ms/step
    ratio: float              # median per-round ratio to the bracketing plain reference
    unsampled_us: float       # watches: extra µs per unsampled step (median over rounds)
    peak_mb: float
    info: dict


def summarize(name: str, workers, args) -> tuple[dict[str, ModeRow], list[str]]:
    plan = Plan(rounds=args.rounds, steps=args.steps, warmup=args.warmup, max_step_s=args.max_step_s,
                untimed_first=True, lengths={"watch-default": DEFAULT_EVERY}, periodic=("watch-default",))
    timing = time_model(name, workers, plan)
    reference = bracketing_reference([mean(b.times) for b in timing.blocks["plain"]])
    rows = {}
    for mode in timing.live:
        blocks = timing.blocks[mode]
        light = [[t for t, h in zip(b.times, b.heavy) if not h] for b in blocks]
        unsampled = [1e6 * (mean(lt) - ref) for lt, ref in zip(light, reference) if lt]
        info = timing.infos.get(mode, {})
        rows[mode] = ModeRow(1e3 * statistics.median(mean(b.times) for b in blocks),
                             statistics.median(mean(b.times) / ref for b, ref in zip(blocks, reference)),
                             statistics.median(unsampled) if mode.startswith("watch") and unsampled else math.nan,
                             info.get("peak_mb", math.nan), info)
    notes = list(timing.notes) + [f"{name}/{m}: not timed (a warm-up step over --max-step-s)" for m in timing.slow]
    for mode, row in rows.items():
        if row.info.get("error"):
            notes.append(f"{name}/{mode}: LEAKY INTERNAL ERROR: {row.info['error']}")
    return rows, notes


# -- output -----------------------------------------------------------------------------------
def time_table(results: dict[str, dict[str, ModeRow]], modes: list[str]):
    header = ("model", "nodes", "plain ms/step", *[f"{m} ms (ratio)" for m in modes[1:]],
              "watch-default unsampled µs/step")
    body = []
    for model, rows in results.items():
        cells = [f"{rows[m].ms:.2f} ({rows[m].ratio:.3f}x)" if m in rows else "skipped" for m in modes[1:]]
        wd = rows.get("watch-default")
        body.append((model, str(rows["plain"].info.get("nodes", "?")), f"{rows['plain'].ms:.2f}", *cells,
                     "" if wd is None or math.isnan(wd.unsampled_us) else f"{wd.unsampled_us:.0f}"))
    return header, body


def memory_table(results: dict[str, dict[str, ModeRow]], modes: list[str]):
    header = ("model", *[f"{m} peak MB (ratio)" for m in modes])
    body = []
    for model, rows in results.items():
        plain = rows["plain"].peak_mb
        body.append((model, *[f"{rows[m].peak_mb:.0f} ({rows[m].peak_mb / plain:.2f}x)" if m in rows else "skipped"
                              for m in modes]))
    return header, body


def _syncs(part: dict) -> str:
    where = ", ".join(f"{w} x{n}" for w, n in part["where"])
    return f"{part['syncs']}" + (f" ({where})" if where else "")


def sync_table(results: dict[str, dict[str, ModeRow]], modes: list[str]):
    header = ("model", "mode", f"syncs, first {FIRST_STEPS} steps", f"syncs, next {STEADY_STEPS} steps",
              "sampled (next)", "leaky flushes: buffer, series (next)", "one step at \"error\"")
    body = []
    for model, rows in results.items():
        for mode in modes:
            sync = rows[mode].info.get("sync") if mode in rows else None
            if not sync:
                body.append((model, mode, "skipped", "", "", "", ""))
                continue
            steady = sync["steady"]
            sampled = "all" if mode.startswith("audit") else str(steady["sampled"])
            body.append((model, mode, _syncs(sync["first"]), _syncs(steady), sampled,
                         f"{steady['flushes']['buffer']}, {steady['flushes']['series']}", sync["error_mode"]))
    return header, body


def parse_args(argv: list[str] | None = None):
    p = parser(__doc__, MODES, MODELS, ROUNDS, f"watch-default: {DEFAULT_EVERY}")
    return parse(p, argv, MODES, MODELS, ROUNDS)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = list(args.modes)
    if not CUDA:
        print("no CUDA device: skipped the GPU timings, peak device memory (torch.cuda.max_memory_allocated) and "
              "the host-sync check (torch.cuda.set_sync_debug_mode); running a CPU smoke of the same code paths at "
              "smoke sizes instead (its numbers are not GPU numbers)", flush=True)
        args.rounds, args.steps, args.warmup = min(args.rounds, 2), min(args.steps, 2), 1
    pinned = f"workers pinned to CPU {args.cpu}" if args.cpu is not None else "not pinned"
    print(f"torch {torch.__version__}, leaky {leaky.__version__}, {'cuda' if CUDA else 'cpu'}, threads "
          f"{args.threads} per worker, {pinned}"
          f", rounds {args.rounds}, steps/block {args.steps} (watch-default {DEFAULT_EVERY}), warm-up {args.warmup}"
          f"{', quick' if args.quick else ''}", flush=True)
    store_dir = tempfile.mkdtemp(prefix="leaky-gpu-")
    options = WorkerOptions(quick=args.quick, seed=args.seed, threads=args.threads, cpu=args.cpu, malloc={},
                            store_dir=store_dir, cockpit_max_gb=0.0)
    t0 = time.perf_counter()
    results, notes = {}, []
    try:
        for name in args.models:
            with worker_pool(modes, options, make_runner, start_method="spawn") as workers:
                results[name], model_notes = summarize(name, workers, args)
                notes += model_notes
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    print(f"  total {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    device = next(iter(results.values()))["plain"].info.get("device", "?") if results else "?"
    print(f"\nTime on {device} (each step waits for the device; ratio: median per-round, to plain):")
    print_table(*time_table(results, modes), args.markdown)
    if CUDA:
        print("\nPeak device memory (torch.cuda.max_memory_allocated over the warm-up and timed steps):")
        print_table(*memory_table(results, modes), args.markdown)
    else:
        print("\nno CUDA device: skipped peak device memory")
    print("\nHost syncs outside leaky's exempted flushes (StepBuffer.flush, StepMonitor.flush), "
          "set_sync_debug_mode(\"warn\"):")
    if not CUDA:
        print("no CUDA device: skipped the sync check (set_sync_debug_mode needs CUDA); the steps ran, leaky's "
              "flushes were counted, no sync can be seen")
    print_table(*sync_table(results, modes), args.markdown)
    print_notes(notes)
    print("\nThe overhead budget (benchmarks/budget.py): whole runs of leaky.watch() at its defaults "
          "(--overhead 2%) against plain runs, with the share the watch measured and the sampling it chose:")
    if CUDA:
        from budget import budget_table
        print(budget_table(["gpu-gpt", "gpu-resnet"], steps=300 if not args.quick else 60, rounds=2))
    else:
        print("no CUDA device: skipped (python benchmarks/budget.py --models gpu-gpt,gpu-resnet runs its CPU smoke)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
