"""Run: python benchmarks/watch_overhead.py [--quick]   (from the repository root)

    python benchmarks/watch_overhead.py --quick                       # smoke run, ~30 s
    python benchmarks/watch_overhead.py --markdown                    # full run, 4-6 min on 2 cores
    python benchmarks/watch_overhead.py --models cnn,lstm --modes watch-default,watch-every-1

Overhead of `leaky.watch()` on a training step, next to Cockpit and naive logging.

Targets: a step under `leaky.watch(every=DEFAULT_EVERY)` costs at most 1.02x a plain step,
and under `leaky.watch(every=1)` at most 1.15x.

Modes, each timed against plain training of the same model (the workloads of
audit_overhead.py, built from the same seed):
  plain               zero_grad, forward, loss, backward, optimizer step
  watch-default       the same inside leaky.watch(every=DEFAULT_EVERY, store=<temp file>)
  watch-every-1       the same inside leaky.watch(every=1, store=<temp file>)
  cockpit-economy     Cockpit (cockpit-for-pytorch) with configuration("economy"), every step
  cockpit-economy-16  the same quantities on a 16-step schedule (linear(interval=16))
  naive-item          after backward: log[name] = p.grad.norm().item() for every parameter
  plain-b             plain again, in its own worker, timed like the uniform modes: an A/A
                      control whose ratio shows how far this machine's noise alone moves a ratio

`leaky.watch()` instruments the whole process (Tensor.backward, the global optimizer hooks,
a torch-function mode), so a watch open in this process would also observe the plain model.
So each mode runs in its own worker process (benchmarks/_harness.py; the modes are
benchmarks/_modes.py; a fresh one for each model, see Allocator below;
torch.set_num_threads(--threads); all pinned to one CPU, --cpu, by default the idlest one,
so that none settles on a busier core than the others), which builds the workload, opens
the mode's context once and keeps it open through the warm-up and all rounds: one watch per
workload, so its sampled steps fall among the timed steps in the proportion they have in
training. The main process interleaves the workers in rounds (plain, watch-default, ...,
plain, ...); one worker computes at a time, the others wait on a pipe. Closing the context
(the watch's final checks and store write) is timed apart, as a once-per-run cost.

Each step is timed on its own (time.perf_counter). A round's reference is the mean plain
step of that round's plain block and the next round's (they bracket the mode's block in
time). Uniform modes: ratio = median over rounds of (mean step / reference), as in
audit_overhead.py. Periodic modes have rare heavy steps: watch-default samples one step in
DEFAULT_EVERY (a step is heavy when the watch's count of sampled steps went up during it);
Cockpit's 16-step schedule makes some quantities work at the tracked step and the next
one (Alpha, Distance, UpdateSize), so 2 steps in 16 are heavy (any quantity's
should_compute). With f the heavy share of a long run:
    ratio = (1 - f) * r_light + f * r_heavy
r_light: median over rounds of (mean light step / reference); r_heavy: mean over the timed
heavy steps of (step / reference). A median of whole blocks would drop the round that holds
the one sampled step; a ratio of totals lets a noisy round decide: it is shown as the
'all-steps ratio' cross-check, next to the interquartile range of the per-round (light)
ratios, a measure of this run's noise, and the 'p10 ratio': the same ratio from the 10th
percentile of the (light) step times, which load from other processes disturbs least.
With rounds x steps >= DEFAULT_EVERY a sampled step of watch-default is timed; with fewer
(--quick), watch-every-1's ratio stands in for it ('*'), since each of its steps is a
sampled step (or, without watch-every-1, the warm-up's first sampled step: '**').

Allocator: with glibc's default malloc, large tensors freed at the end of a step are given
back to the system and faulted in again at the next one (~5000 page faults per step on the
MLP), and how much of that happens depends on each process's allocation history (glibc
moves its mmap threshold as it goes). Two identical plain workers then differed by 10-20%
on the MLP and the CNN, in either direction, and a watch, whose sampled steps clone every
weight, came out up to 20% *faster* than plain. So each worker first calls
mallopt(M_TRIM_THRESHOLD, 1 GiB) and mallopt(M_TOP_PAD, 256 MiB), as MALLOC_TRIM_THRESHOLD_
and MALLOC_TOP_PAD_ would (--keep-malloc: glibc's defaults, to see the effect). Even so, a
process that had trained the CNN first then took ~5000 page faults per LSTM step (40%
slower), so each model gets fresh workers (forked: instant). The 'faults/step' column
(minor page faults per timed step, from getrusage) and the plain-b control show whether a
run was caught by this. Every mode times blocks of the same length as plain: a block's
first step finds caches cold (the other workers ran meanwhile), and shorter blocks would
charge more of that to a mode on short steps.

Guards, so the run stays within minutes and within memory on a small machine:
  * A uniform mode whose step costs over 2x plain times shorter blocks: about two plain
    blocks' worth (at least one step); at that cost a cold first step matters little.
  * Cockpit's economy quantities need per-sample gradients (batch x parameters floats). If
    that estimate exceeds --cockpit-max-gb, both Cockpit modes are skipped for the model
    (the full MLP, 2.9M parameters x batch 256, measured once by hand: ~40 s a step and
    ~13 GB peak memory).
  * A mode whose warm-up step takes over --max-step-s is not timed in rounds; its ratio is
    estimated from its warm-up steps and marked '~' (first steps include one-time setup).
  * BackPACK handles only some layers (Linear, Conv, BatchNorm, LSTM, Embedding, ...); a
    model with parameters in another module (MultiheadAttention, LayerNorm, a bare
    nn.Parameter) is skipped for Cockpit with a note "Cockpit/BackPACK does not support ...".
If cockpit-for-pytorch or backpack-for-pytorch is not installed, the Cockpit modes are
skipped with a note (pip install cockpit-for-pytorch backpack-for-pytorch; keep the CPU
torch: --no-deps, plus unfoldNd, einops, json-tricks, matplotlib, pandas, scipy, seaborn).
If a mode fails on a model, its traceback is printed and that mode is skipped for it.
"""
from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import leaky  # noqa: E402
from leaky.watch import DEFAULT_EVERY  # noqa: E402

from _harness import (M_TOP_PAD, M_TRIM_THRESHOLD, ModelTiming, Plan, Result, WorkerOptions,  # noqa: E402
                      bracketing_reference, iqr, mean, parse, parser, time_model, worker_pool)
from _modes import close_problems, cockpit_status, make_runner  # noqa: E402
from _tables import print_notes, print_table, print_verdicts  # noqa: E402
from audit_overhead import BUILDERS  # noqa: E402

TARGETS = {"watch-default": 1.02, "watch-every-1": 1.15}
MODES = ("plain", "watch-default", "watch-every-1", "cockpit-economy", "cockpit-economy-16", "naive-item",
         "plain-b")
COCKPIT_MODES = ("cockpit-economy", "cockpit-economy-16")
PERIODIC = ("watch-default", "cockpit-economy-16")   # modes whose heavy steps recur (sampled, tracked)
ROUNDS = (20, 6)                                     # default rounds: full, --quick
# glibc malloc in the workers (unless --keep-malloc): no heap trimming, a padded top.
MALLOC = {M_TRIM_THRESHOLD: 1 << 30, M_TOP_PAD: 1 << 28}


# -- the main process: one model's timings, summarized ------------------------------
@dataclass
class ModeResult:
    ms: float = float("nan")          # amortized ms per step (median-based)
    ratio: float = float("nan")       # amortized ratio to plain
    total_ratio: float = float("nan")  # mean step / mean plain step over all timed steps
    mark: str = ""                    # "~" from warm-up only; "*" "**" heavy-step stand-ins; "?" none seen
    block: int = 0                    # steps per timed block
    timed: int = 0                    # steps timed in rounds
    heavy_timed: int = 0
    fraction: float = 0.0             # share of heavy steps in a long run
    spread: tuple[float, float] = (float("nan"), float("nan"))  # IQR of per-round (light) ratios
    p10_ratio: float = float("nan")   # the same ratio from the fastest tenth of (light) steps
    faults: float = float("nan")      # minor page faults per timed step
    heavy_ms: float = float("nan")    # median heavy step
    info: dict = field(default_factory=dict)


def bench_model(name: str, workers, args) -> Result:
    plan = Plan(rounds=args.rounds, steps=args.steps, warmup=args.warmup, max_step_s=args.max_step_s,
                untimed_first=False, periodic=PERIODIC)
    timing = time_model(name, workers, plan)
    results = {mode: _estimate(name, mode, timing, args) for mode in timing.slow}
    plain = [b.times for b in timing.blocks["plain"]]
    # watch-every-1 first: a sampled step of watch-default does the same work as any of its
    # steps, so its ratio stands in when no sampled step of watch-default was timed.
    for mode in sorted(timing.live, key=lambda m: m != "watch-every-1"):
        every_1 = results.get("watch-every-1") if mode == "watch-default" else None
        stand_in = (every_1.ratio, every_1.ms) if every_1 is not None and not every_1.mark else None
        blocks = timing.blocks[mode]
        res = _summarize(mode, timing.fraction[mode], [b.times for b in blocks], [b.heavy for b in blocks], plain,
                         timing.warm[mode], timing.infos[mode], stand_in)
        res.block = timing.block[mode]
        res.faults = sum(b.faults for b in blocks) / max(1, res.timed)
        results[mode] = res
    return Result(name, results["plain"].ms, results, timing.notes)


def _estimate(name: str, mode: str, timing: ModelTiming, args) -> ModeResult:
    """A mode too slow to time in rounds, from its warm-up steps (amortized when periodic)."""
    times, heavy = timing.warm[mode]
    plain = statistics.median(timing.warm["plain"][0])
    f = timing.fraction[mode]
    est = _amortize(f, [t for t, h in zip(times, heavy) if not h], [t for t, h in zip(times, heavy) if h])
    timing.notes.append(f"{name}/{mode}: a warm-up step took {max(times):.1f} s (over --max-step-s "
                        f"{args.max_step_s:g}); not timed in rounds, estimated from {len(times)} warm-up step(s): "
                        f"~{est * 1e3:.0f} ms/step, ~{est / plain:.0f}x")
    return ModeResult(ms=1e3 * est, ratio=est / plain, mark="~", info={**timing.infos[mode], "warm": times},
                      fraction=f)


def _p10(xs: list[float]) -> float:
    """10th percentile: extra load from other processes only ever adds time to a step."""
    return statistics.quantiles(xs, n=10)[0] if len(xs) > 1 else xs[0]


def _amortize(f: float, light: list[float], heavy: list[float]) -> float:
    """Seconds per step with heavy steps in their share f of a long run."""
    if not heavy or not light:
        return statistics.median(light or heavy)
    return (1 - f) * statistics.median(light) + f * mean(heavy)


def _summarize(mode: str, f: float, rounds: list[list[float]], rounds_heavy: list[list[bool]],
               plain: list[list[float]], warm: tuple[list[float], list[bool]], info: dict,
               stand_in: tuple[float, float] | None = None) -> ModeResult:
    # Each round's reference: the plain blocks of this round and the next, which bracket
    # this mode's block in time (the load of a shared machine drifts within a round).
    plain_means = bracketing_reference([mean(r) for r in plain])
    all_steps = [t for r in rounds for t in r]
    plain_steps = [t for r in plain for t in r]
    total_ratio = mean(all_steps) / mean(plain_steps)
    res = ModeResult(total_ratio=total_ratio, timed=len(all_steps), info=info, fraction=f)
    if mode not in PERIODIC:
        res.ms = 1e3 * statistics.median(mean(r) for r in rounds)
        per_round = [mean(r) / p for r, p in zip(rounds, plain_means)]
        res.ratio = 1.0 if mode == "plain" else statistics.median(per_round)
        res.spread = iqr(per_round) if mode != "plain" else (float("nan"), float("nan"))
        res.p10_ratio = _p10(all_steps) / _p10(plain_steps)
        return res
    light_ms, light_ratio, heavy_s, heavy_ratio = [], [], [], []
    for r, h, p in zip(rounds, rounds_heavy, plain_means):
        light = [t for t, is_heavy in zip(r, h) if not is_heavy]
        if light:
            light_ms.append(mean(light))
            light_ratio.append(mean(light) / p)
        for t, is_heavy in zip(r, h):
            if is_heavy:
                heavy_s.append(t)
                heavy_ratio.append(t / p)
    res.heavy_timed = len(heavy_s)
    if not heavy_s and stand_in is not None:     # none timed: watch-every-1's step stands in
        res.mark = "*"
        heavy_ratio, heavy_s = [stand_in[0]], [stand_in[1] / 1e3]
    elif not heavy_s:    # none timed: take the warm-up's (they include first-step setup)
        warm_heavy = [t for t, is_heavy in zip(*warm) if is_heavy]
        if warm_heavy:
            res.mark = "**"
            heavy_s = warm_heavy
            heavy_ratio = [t / statistics.median(plain_means) for t in warm_heavy]
    res.spread = iqr(light_ratio)
    r_light = statistics.median(light_ratio)
    ms_light = statistics.median(light_ms)
    if heavy_s:       # the heavy steps' mean: they may be of more than one kind (Cockpit)
        res.heavy_ms = 1e3 * mean(heavy_s)
        res.ratio = (1 - f) * r_light + f * mean(heavy_ratio)
        light_steps = [t for r, h in zip(rounds, rounds_heavy) for t, is_heavy in zip(r, h) if not is_heavy]
        res.p10_ratio = (1 - f) * _p10(light_steps) / _p10(plain_steps) + f * mean(heavy_ratio)
        res.ms = 1e3 * ((1 - f) * ms_light + f * mean(heavy_s))
    else:
        res.mark = "?"   # no heavy step seen at all: light steps only
        res.ratio, res.ms = r_light, 1e3 * ms_light
    return res


# -- output ---------------------------------------------------------------------------
def _ratio_cell(r: Result, mode: str) -> str:
    m = r.modes.get(mode)
    if m is None:
        return "skipped"
    digits = 0 if m.ratio >= 100 else 1 if m.ratio >= 10 else 2
    return f"~{m.ratio:.{digits}f}x" if m.mark == "~" else f"{m.ratio:.{digits}f}x{m.mark}"


def summary_rows(results: list[Result], modes: list[str]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    header = ("model", "plain ms/step", *[f"{m} ratio" for m in modes if m != "plain"])
    body = [(r.model, f"{r.plain_ms:.1f}", *[_ratio_cell(r, m) for m in modes if m != "plain"]) for r in results]
    return header, body


def detail_rows(results: list[Result], modes: list[str]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    header = ("model", "mode", "ms/step", "ratio", "round ratios IQR", "all-steps ratio", "p10 ratio",
              "faults/step", "steps/block", "steps timed", "heavy share", "heavy steps timed", "heavy step ms",
              "exit ms (once)")
    body = []
    for r in results:
        for mode in modes:
            m = r.modes.get(mode)
            if m is None:
                body.append((r.model, mode, "skipped", "", "", "", "", "", "", "", "", "", "", ""))
                continue
            est = m.mark == "~"
            exit_s = m.info.get("exit_s")
            lo, hi = m.spread
            body.append((r.model, mode, f"{m.ms:.1f}", _ratio_cell(r, mode),
                         "" if est or math.isnan(lo) else f"{lo:.2f}-{hi:.2f}",
                         "" if est else f"{m.total_ratio:.3f}x", "" if est else f"{m.p10_ratio:.3f}x",
                         "" if est else f"{m.faults:.0f}",
                         "" if est else str(m.block),
                         "0 (est.)" if est else str(m.timed),
                         f"{m.fraction:.3g}" if mode in PERIODIC else "",
                         str(m.heavy_timed) if mode in PERIODIC and not est else "",
                         f"{m.heavy_ms:.1f}" if mode in PERIODIC and not math.isnan(m.heavy_ms) else "",
                         f"{1e3 * exit_s:.1f}" if exit_s is not None else ""))
    return header, body


def watch_notes(results: list[Result]) -> list[str]:
    """What each watch recorded: a check that it really observed (no internal error)."""
    out = []
    for r in results:
        for mode in ("watch-default", "watch-every-1"):
            m = r.modes.get(mode)
            if m is None or not m.info:
                continue
            i = m.info
            store = i.get("store", {})
            found = ", ".join(i.get("findings") or []) or "none"
            text = (f"{r.model}/{mode}: {i.get('sampled')} sampled step(s); store: run {store.get('status')}, "
                    f"{store.get('steps')} step rows, module stats at {store.get('module_stat_steps')} step(s), "
                    f"{store.get('findings')} finding row(s); findings at the end: {found}")
            if i.get("error"):
                text += f"; LEAKY INTERNAL ERROR: {i['error']}"
            out.append(text + close_problems(i))
    return out


def _source_version() -> str:
    """The commit leaky was measured at, and whether leaky/ had uncommitted changes."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(leaky.__file__)))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "leaky"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    if not head:
        return "unknown (not a git checkout)"
    return f"commit {head}" + (" + uncommitted changes in leaky/" if dirty else "")


def parse_args(argv: list[str] | None = None):
    p = parser(__doc__, MODES, list(BUILDERS), ROUNDS,
               f"rounds x steps >= {DEFAULT_EVERY} puts a sampled step of watch-default among the timed ones")
    p.add_argument("--keep-malloc", action="store_true",
                   help="leave glibc malloc at its defaults in the workers (by default they call "
                        "mallopt(M_TRIM_THRESHOLD, 1 GiB) and mallopt(M_TOP_PAD, 256 MiB))")
    return parse(p, argv, MODES, list(BUILDERS), ROUNDS)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = list(args.modes)
    notes: list[str] = []
    if any(m in modes for m in COCKPIT_MODES):
        ok, why = cockpit_status()
        if not ok:
            notes.append(f"Cockpit modes skipped: {why}")
            print(f"note: Cockpit modes skipped: {why}", flush=True)
            modes = [m for m in modes if m not in COCKPIT_MODES]
        elif why:
            notes.append(why)
    print(f"torch {torch.__version__}, leaky {leaky.__version__}, threads {args.threads} per worker, "
          f"{'workers pinned to CPU ' + str(args.cpu) if args.cpu is not None else 'workers not pinned'}, "
          f"rounds {args.rounds}, steps/block {args.steps}, warm-up {args.warmup}, "
          f"DEFAULT_EVERY {DEFAULT_EVERY}{', quick' if args.quick else ''}", flush=True)
    malloc = "glibc defaults" if args.keep_malloc else "no trimming, 256 MiB top pad (mallopt)"
    print(f"leaky source: {_source_version()}; worker malloc: {malloc}", flush=True)
    print("targets: " + ", ".join(f"{m} <= {t:g}x" for m, t in TARGETS.items()), flush=True)
    if args.rounds * args.steps < DEFAULT_EVERY and "watch-default" in modes:
        print(f"note: rounds x steps = {args.rounds * args.steps} < {DEFAULT_EVERY}: no sampled step of "
              "watch-default will be timed; a step of watch-every-1 stands in for it ('*')", flush=True)
    store_dir = tempfile.mkdtemp(prefix="leaky-watch-bench-")
    options = WorkerOptions(quick=args.quick, seed=args.seed, threads=args.threads, cpu=args.cpu,
                            malloc={} if args.keep_malloc else MALLOC, store_dir=store_dir,
                            cockpit_max_gb=args.cockpit_max_gb)
    t0 = time.perf_counter()
    results = []
    try:
        for name in args.models:
            # Fresh workers per model: a process's earlier models change its allocator state
            # (after the CNN, the LSTM took ~5000 page faults and 40% longer per step).
            with worker_pool(modes, options, make_runner) as workers:
                results.append(bench_model(name, workers, args))
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    print(f"  total {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    print()
    print_table(*summary_rows(results, modes), args.markdown)
    print()
    print_table(*detail_rows(results, modes), args.markdown)
    marks = {m.mark for r in results for m in r.modes.values()}
    if "~" in marks:
        print("\n~ estimated from warm-up steps (not interleaved; the first step includes one-time setup)")
    if "*" in marks:
        print("* no sampled step among the timed steps: a step of watch-every-1 stands in for it")
    if "**" in marks:
        print("** no heavy step among the timed steps: the heavy-step cost is from the warm-up "
              "(first steps include one-time setup)")
    if "?" in marks:
        print("? no heavy step seen at all: light steps only")
    print_notes(notes + [n for r in results for n in r.notes] + watch_notes(results))
    print()
    print_verdicts(results, TARGETS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
