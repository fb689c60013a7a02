"""Run: python benchmarks/depth_sweep.py [--quick]   (from the repository root)

    python benchmarks/depth_sweep.py --quick                 # 4 small configurations, ~2 min on 2 cores
    python benchmarks/depth_sweep.py --markdown              # 7 configurations, 5 rounds, ~10 min on 2 shared cores
    python benchmarks/depth_sweep.py --models d4-w4096       # width 4096 too (~1.5 s a plain step here)
    python benchmarks/depth_sweep.py --models d10-w64,d200-w64 --rounds 9

Is leaky's cost linear in depth and width? Narrow deep MLPs (Linear+ReLU, width 64, depth 10,
50 and 200) and wide shallow ones (depth 4, widths 64, 256, 1024 and 2048; 4096 with --models),
batch 64, Adam,
cross-entropy over 10 classes, a fixed synthetic batch; each step zero_grad, forward, loss,
backward, optimizer step. Modes (benchmarks/_modes.py), each in its own worker process
(benchmarks/_harness.py: forked afresh per configuration, pinned to one CPU, interleaved
in rounds, each block starting with one untimed step):

  plain          the step
  audit-held     leaky.audit(steps=None) open from set-up to close: steady-state audited
                 steps, the per-node figure
  audit          leaky.audit(steps=None) entered and left around each timed block, as in
                 audit_overhead.py and overhead.py: each block's first step is an audit's first
                 (its once-per-audit probes), which weighs on short steps
  watch-default  leaky.watch(every=DEFAULT_EVERY, store=<temp file>), open from set-up to
                 close, then SETTLE_STEPS untimed steps (past the first COUPLING_STEPS steps,
                 which probe whose loss reaches whom even unsampled, and past the sampled step
                 COUPLING_STEPS); its timed steps are unsampled ones (a sampled one among them
                 would be left out and counted)
  watch-every-1  leaky.watch(every=1, ...) with the same untimed steps: every step sampled
  plain-b        plain again in its own worker: the A/A control, this run's noise

Blocks of --steps steps (more for the shortest steps without --quick: LONG_BLOCKS).
Per configuration: the autograd nodes of one step's backward graph (every node reachable
from loss.grad_fn through next_functions, AccumulateGrad included; counted in the plain
worker after its rounds), leaky's op sites per step (len(audit.recorder.sites.sites)), and
the trainable parameters. Each round's reference is the mean plain step of that round's plain
block and the next one's (bracketing_reference); a mode's extra time per step is the median
over rounds of (its block's mean step - the reference), its ratio the median of (mean step /
reference). Reported: audit extra µs per graph node and its ratio (held, and per block); watch-default extra µs
per unsampled step (and the same per parameter, million: the unsampled step's one real pass
is a norm over every gradient) and its ratio; watch every=1 extra µs per node and ratio;
plain-b's extra µs per step and ratio, what a mode that costs nothing reads here. Then a
least-squares line through (nodes, extra µs per step) over the width-64 configurations, per mode:
a constant per-node cost means the line's intercept is small and its residuals too.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import leaky  # noqa: E402
from leaky.watch import DEFAULT_EVERY  # noqa: E402

from _harness import (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, ModelTiming, Plan, WorkerOptions,  # noqa: E402
                      bracketing_reference, iqr, mean, parse, parser, time_model, worker_pool)
from leaky.record.steps import COUPLING_STEPS  # noqa: E402

from _modes import RUNNERS, Runner, WatchRunner  # noqa: E402
from _tables import print_notes, print_table  # noqa: E402
from audit_overhead import Workload  # noqa: E402

MODES = ("plain", "audit-held", "audit", "watch-default", "watch-every-1", "plain-b")
SETTLE_STEPS = COUPLING_STEPS + 1   # untimed watch steps at set-up: past the early probes and a sampled step
BATCH = 64
CONFIGS = {f"d{d}-w{w}": (d, w) for d, w in [(10, 64), (50, 64), (200, 64), (4, 64), (4, 256), (4, 1024),
                                              (4, 2048), (4, 4096)]}
DEFAULT = tuple(name for name in CONFIGS if name != "d4-w4096")   # 4096: ~1.5 s a step here, on request
# Steps per timed block (at least --steps) for the short steps, so that a block lasts ~50 ms
# or more (a plain step here: d4-w64 ~1 ms, d10-w64 ~2.5 ms, d4-w256 ~3 ms, d50-w64 ~13 ms):
# a 5-step block of 1-3 ms steps is at the mercy of one context switch.
LONG_BLOCKS = {"d4-w64": 40, "d10-w64": 20, "d4-w256": 20, "d50-w64": 5}
QUICK = ("d10-w64", "d50-w64", "d4-w64", "d4-w256")   # the default set with --quick
ROUNDS = (5, 3)                     # default rounds: full, --quick
MALLOC = {M_MMAP_THRESHOLD: 32 * 2**20, M_TRIM_THRESHOLD: 128 * 2**20}   # as overhead.py


# -- the workload and the graph ---------------------------------------------------------
def build_mlp(depth: int, width: int, batch: int = BATCH) -> Workload:
    """`depth` Linear(width, width)+ReLU layers and a Linear(width, 10) head, Adam."""
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10))
    x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))
    return Workload(model, torch.optim.Adam(model.parameters(), lr=1e-3), x, y, nn.functional.cross_entropy)


def graph_nodes(loss: torch.Tensor) -> dict[str, int]:
    """The autograd nodes reachable from loss.grad_fn (each counted once): all, and how many
    of them are AccumulateGrad (a parameter's leaf)."""
    seen, stack = set(), [loss.grad_fn]
    accumulate = 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        accumulate += type(node).__name__ == "AccumulateGrad"
        stack.extend(child for child, _ in node.next_functions)
    return {"nodes": len(seen), "accumulate_grad": accumulate}


def count_graph(work: Workload) -> dict[str, int]:
    """One step's backward graph, built and dropped without a backward."""
    work.opt.zero_grad(set_to_none=True)
    loss = work.loss_fn(work.model(work.inputs), work.targets)
    counts = graph_nodes(loss)
    counts["params"] = sum(p.numel() for p in work.model.parameters() if p.requires_grad)
    return counts


class GraphRunner(Runner):
    """Plain training; closing it counts one step's graph (after the rounds: untimed)."""

    def close(self) -> dict:
        return {**self.info, **count_graph(self.work)}


class SettledWatch(WatchRunner):
    """A watch that, once open, takes SETTLE_STEPS untimed steps: the first COUPLING_STEPS
    steps of a run probe whose loss reaches whom (sampled or not), and step COUPLING_STEPS is
    a sampled one; a long run's unsampled step is past both."""

    def setup(self) -> None:
        super().setup()
        for _ in range(SETTLE_STEPS):
            self.work.step()


RUNNER = {**RUNNERS, "plain": GraphRunner, "watch-default": partial(SettledWatch, every=DEFAULT_EVERY),
          "watch-every-1": partial(SettledWatch, every=1)}


def make_runner(mode: str, model: str, options: WorkerOptions) -> Runner:
    torch.manual_seed(options.seed)
    return RUNNER[mode](build_mlp(*CONFIGS[model]), model, options)


# -- one configuration, summarized ------------------------------------------------------
@dataclass
class Extra:
    """A mode's cost over plain, per round and summarized."""
    us: list[float] = field(default_factory=list)       # extra µs per step, per round
    ratio: list[float] = field(default_factory=list)    # mean step / reference, per round
    left_out: int = 0                                    # sampled steps left out (watch-default)

    def median_us(self) -> float:
        return statistics.median(self.us) if self.us else float("nan")

    def median_ratio(self) -> float:
        return statistics.median(self.ratio) if self.ratio else float("nan")


@dataclass
class Row:
    name: str
    depth: int
    width: int
    plain_ms: float
    graph: dict
    ops: int | None
    extras: dict[str, Extra]
    notes: list[str]
    steps: int = 0          # steps per plain block


def _extra(mode: str, timing: ModelTiming, reference: list[float]) -> Extra:
    """Per round: the mode's mean step (watch-default: its unsampled steps) over the reference."""
    out = Extra()
    for block, ref in zip(timing.blocks[mode], reference):
        times = block.times
        if mode == "watch-default":
            times = [t for t, heavy in zip(block.times, block.heavy) if not heavy]
            out.left_out += len(block.times) - len(times)
        if times:
            out.us.append(1e6 * (mean(times) - ref))
            out.ratio.append(mean(times) / ref)
    return out


def bench_config(name: str, workers, args) -> Row:
    steps = args.steps if args.quick else max(args.steps, LONG_BLOCKS.get(name, 0))
    plan = Plan(rounds=args.rounds, steps=steps, warmup=args.warmup, max_step_s=args.max_step_s,
                untimed_first=True, periodic=("watch-default",))
    timing = time_model(name, workers, plan)
    if "plain" not in timing.blocks:
        raise RuntimeError(f"plain training was not timed on {name}")
    plain = [mean(b.times) for b in timing.blocks["plain"]]
    reference = bracketing_reference(plain)
    extras = {mode: _extra(mode, timing, reference) for mode in timing.live if mode != "plain"}
    notes = list(timing.notes) + [f"{name}/{mode}: not timed in rounds (a warm-up step over --max-step-s)"
                                  for mode in timing.slow]
    for mode in ("audit-held", "audit", "watch-default", "watch-every-1"):
        error = timing.infos.get(mode, {}).get("error")
        if error:
            notes.append(f"{name}/{mode}: LEAKY INTERNAL ERROR: {error}")
    if "watch-default" in extras and extras["watch-default"].left_out:
        notes.append(f"{name}/watch-default: {extras['watch-default'].left_out} sampled step(s) among the timed "
                     "ones, left out")
    depth, width = CONFIGS[name]
    return Row(name, depth, width, 1e3 * statistics.median(plain), timing.infos.get("plain", {}),
               timing.infos.get("audit-held", {}).get("ops") or timing.infos.get("audit", {}).get("ops"), extras, notes,
               timing.block.get("plain", steps))


# -- output -----------------------------------------------------------------------------
def _us(x: float) -> str:
    return "" if x != x else f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def _spread(values: list[float], scale: float = 1.0) -> str:
    if len(values) < 2:
        return ""
    lo, hi = iqr([v / scale for v in values])
    return f"{_us(lo)} to {_us(hi)}"


def _cell(r: Row, mode: str, divide_by: float = 1.0) -> str:
    return _us(r.extras[mode].median_us() / divide_by) if mode in r.extras else "skipped"


def _ratio(r: Row, mode: str) -> str:
    return f"{r.extras[mode].median_ratio():.3f}x" if mode in r.extras else "skipped"


def audit_table(rows: list[Row]):
    header = ("config", "depth", "width", "nodes", "op sites", "plain ms/step", "audit µs/node", "audit ratio",
              "audit per block µs/node", "audit per block ratio", "A/A µs/step", "A/A ratio")
    body = []
    for r in rows:
        nodes = r.graph.get("nodes") or float("nan")
        body.append((r.name, str(r.depth), str(r.width), str(r.graph.get("nodes", "?")), str(r.ops or "?"),
                     f"{r.plain_ms:.2f}", _cell(r, "audit-held", nodes), _ratio(r, "audit-held"),
                     _cell(r, "audit", nodes), _ratio(r, "audit"), _cell(r, "plain-b"), _ratio(r, "plain-b")))
    return header, body


def watch_table(rows: list[Row]):
    header = ("config", "params", "plain ms/step", "watch unsampled µs/step", "watch unsampled ratio",
              "unsampled µs per M params", "watch every=1 µs/node", "watch every=1 ratio", "A/A µs/step")
    body = []
    for r in rows:
        nodes = r.graph.get("nodes") or float("nan")
        params = r.graph.get("params") or float("nan")
        body.append((r.name, f"{params / 1e6:.3g}M", f"{r.plain_ms:.2f}", _cell(r, "watch-default"),
                     _ratio(r, "watch-default"), _cell(r, "watch-default", params / 1e6),
                     _cell(r, "watch-every-1", nodes), _ratio(r, "watch-every-1"), _cell(r, "plain-b")))
    return header, body


def spread_table(rows: list[Row]):
    """The interquartile range over rounds of each extra (µs per node, or per step)."""
    header = ("config", "audit µs/node IQR", "audit per block µs/node IQR", "watch unsampled µs/step IQR",
              "watch every=1 µs/node IQR", "A/A µs/step IQR", "A/A ratio IQR", "rounds", "steps/block")
    body = []
    for r in rows:
        nodes = r.graph.get("nodes") or float("nan")
        get = lambda mode: r.extras[mode].us if mode in r.extras else []  # noqa: E731
        aa = r.extras.get("plain-b")
        aa_ratio = f"{iqr(aa.ratio)[0]:.3f}-{iqr(aa.ratio)[1]:.3f}" if aa and len(aa.ratio) > 1 else ""
        body.append((r.name, _spread(get("audit-held"), nodes), _spread(get("audit"), nodes),
                     _spread(get("watch-default")), _spread(get("watch-every-1"), nodes), _spread(get("plain-b")),
                     aa_ratio, str(len(get("plain-b"))), str(r.steps)))
    return header, body


def linear_fit(rows: list[Row], mode: str = "audit") -> str:
    """Least squares extra µs/step = a + b * nodes over the width-64 rows (two or more)."""
    pts = [(r.graph["nodes"], r.extras[mode].median_us()) for r in rows
           if r.width == 64 and mode in r.extras and r.graph.get("nodes")]
    if len(pts) < 2:
        return ""
    xs, ys = zip(*pts)
    mx, my = mean(xs), mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    worst = max(abs(y - (a + b * x)) for x, y in pts)
    return (f"{mode}, width 64: extra µs/step = {a:.0f} + {b:.2f} x nodes over {len(pts)} depths "
            f"(nodes {', '.join(map(str, xs))}; measured {', '.join(_us(y) for y in ys)} µs); "
            f"worst residual {worst:.0f} µs")


# -- main -------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None):
    p = parser(__doc__, MODES, list(CONFIGS), ROUNDS, "audit blocks are shortened where a step costs over 2x plain")
    args = parse(p, argv, MODES, list(CONFIGS), ROUNDS)
    if args.models == list(CONFIGS):       # --models not given
        args.models = list(QUICK if args.quick else DEFAULT)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"torch {torch.__version__}, leaky {leaky.__version__}, threads {args.threads} per worker, "
          f"{'workers pinned to CPU ' + str(args.cpu) if args.cpu is not None else 'workers not pinned'}, "
          f"rounds {args.rounds}, steps/block {args.steps}{'' if args.quick else ' (more for short steps)'}, "
          f"warm-up {args.warmup}, batch {BATCH}, "
          f"DEFAULT_EVERY {DEFAULT_EVERY}{', quick' if args.quick else ''}", flush=True)
    store_dir = tempfile.mkdtemp(prefix="leaky-depth-")
    options = WorkerOptions(quick=args.quick, seed=args.seed, threads=args.threads, cpu=args.cpu, malloc=MALLOC,
                            store_dir=store_dir, cockpit_max_gb=0.0)
    t0 = time.perf_counter()
    rows = []
    try:
        for name in args.models:     # fresh workers per configuration, as overhead.py
            with worker_pool(args.modes, options, make_runner) as workers:
                rows.append(bench_config(name, workers, args))
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    print(f"  total {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    print()
    print("Audit: extra µs per autograd node of one step's graph, held open (steady state) and entered per block:")
    print_table(*audit_table(rows), args.markdown)
    print()
    print(f"Watch: extra µs per unsampled step (every={DEFAULT_EVERY}, after {SETTLE_STEPS} untimed steps), and "
          "every=1 per node:")
    print_table(*watch_table(rows), args.markdown)
    print()
    print("Spread over rounds (interquartile range of the per-round values):")
    print_table(*spread_table(rows), args.markdown)
    fits = [linear_fit(rows, mode) for mode in ("audit-held", "audit", "watch-default", "watch-every-1")]
    print_notes([f for f in fits if f] + [n for r in rows for n in r.notes])
    return 0


if __name__ == "__main__":
    sys.exit(main())
