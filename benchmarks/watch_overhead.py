"""Run: python benchmarks/watch_overhead.py [--quick]   (from the repository root)

    python benchmarks/watch_overhead.py --quick                       # smoke run, ~1.5 min
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
So each mode runs in its own worker process (a fresh one for each model, see Allocator
below; torch.set_num_threads(--threads); all pinned to one CPU, --cpu, so that none settles
on a busier core than the others), which builds the workload, opens the mode's context
once and keeps it open through the warm-up and all rounds: one watch per workload, so its
sampled steps fall among the timed steps in the proportion they have in training. The main process interleaves the
workers in rounds (plain, watch-default, ..., plain, ...); one worker computes at a time,
the others wait on a pipe. Closing the context (the watch's final checks and store write)
is timed apart, as a once-per-run cost.

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

import argparse
import importlib.util
import math
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import leaky  # noqa: E402
from audit_overhead import BUILDERS, Workload  # noqa: E402
from leaky.watch import DEFAULT_EVERY  # noqa: E402
from _shared import CockpitLoop, Skip, import_cockpit, naive_step, iqr, print_table  # noqa: E402

TARGETS = {"watch-default": 1.02, "watch-every-1": 1.15}
# glibc malloc settings for the workers (see --keep-malloc): no heap trimming, a padded top.
M_TRIM_THRESHOLD, M_TOP_PAD = -1, -2          # glibc mallopt() parameters
MALLOPT = {M_TRIM_THRESHOLD: 1 << 30, M_TOP_PAD: 1 << 28}


def _tune_malloc() -> bool:
    """glibc: keep freed memory (no trimming) and pad the heap's top, as the environment
    variables MALLOC_TRIM_THRESHOLD_ and MALLOC_TOP_PAD_ would. False elsewhere."""
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        return all(libc.mallopt(param, value) == 1 for param, value in MALLOPT.items())
    except (OSError, AttributeError):
        return False
MODES = ("plain", "watch-default", "watch-every-1", "cockpit-economy", "cockpit-economy-16", "naive-item",
         "plain-b")
COCKPIT_MODES = ("cockpit-economy", "cockpit-economy-16")
PERIODIC = ("watch-default", "cockpit-economy-16")   # modes whose heavy steps recur (sampled, tracked)


# -- the modes, run inside a worker process -----------------------------------------------
class PlainRunner:
    heavy_fraction = 0.0     # share of steps that are heavy (sampled, tracked) in a long run

    def __init__(self, work: Workload, **_) -> None:
        self.work = work

    def setup(self) -> None:
        pass

    def step(self) -> bool:
        self.work.step()
        return False

    def close(self) -> dict:
        return {}


class NaiveRunner(PlainRunner):
    """Per-parameter gradient norms copied to the host one by one, after every backward."""

    def __init__(self, work: Workload, **_) -> None:
        super().__init__(work)
        self.log: dict[str, float] = {}

    def step(self) -> bool:
        naive_step(self.work, self.log)
        return False


class WatchRunner(PlainRunner):
    """One `leaky.watch` open from setup to close; a step is heavy if it was sampled."""

    def __init__(self, work: Workload, every: int, store: str, **_) -> None:
        super().__init__(work)
        self.every = every
        self.store = store
        self.run = None
        self.heavy_fraction = 1 / every

    def setup(self) -> None:
        self.run = leaky.watch(every=self.every, store=self.store).__enter__()

    def step(self) -> bool:
        before = self.run.recorder.steps_done     # count of sampled (folded) steps
        self.work.step()
        return self.run.recorder.steps_done != before

    def close(self) -> dict:
        start = time.perf_counter()
        self.run.__exit__(None, None, None)
        exit_s = time.perf_counter() - start
        info = {"exit_s": exit_s, "sampled": self.run.stats.steps, "error": self.run.recorder.error}
        try:
            info["findings"] = sorted({f.code for f in self.run.findings})
        except Exception:
            info["findings_error"] = traceback.format_exc()
        try:
            from leaky.store import Store
            with Store(self.store) as store:
                run = store.run(self.run.run_id)
                info["store"] = {"status": run.get("status"), "steps": len(store.steps(self.run.run_id)),
                                 "module_stat_steps": len({r["step"] for r in store.module_stats(self.run.run_id)}),
                                 "findings": len(store.findings(self.run.run_id))}
        except Exception:
            info["store_error"] = traceback.format_exc()
        return info


class CockpitRunner(PlainRunner):
    """Cockpit's economy configuration (see _peers.CockpitLoop), every step or every 16th."""

    def __init__(self, work: Workload, model_name: str, interval: int | None, max_gb: float, **_) -> None:
        super().__init__(work)
        self.name, self.interval, self.max_gb = model_name, interval, max_gb

    def setup(self) -> None:
        self.loop = CockpitLoop(self.work, self.name, self.interval or 1, self.max_gb)
        self.heavy_fraction = statistics.mean(self.loop.heavy(s) for s in range(16, 16 + 64 * 16))

    def step(self) -> bool:
        step = self.loop.step()
        return self.interval is not None and self.loop.heavy(step)

    def close(self) -> dict:
        return {"tracked": len(self.loop.cockpit.get_output())}


def make_runner(mode: str, work: Workload, model_name: str, store: str, max_gb: float):
    if mode in ("plain", "plain-b"):
        return PlainRunner(work)
    if mode == "naive-item":
        return NaiveRunner(work)
    if mode == "watch-default":
        return WatchRunner(work, every=DEFAULT_EVERY, store=store)
    if mode == "watch-every-1":
        return WatchRunner(work, every=1, store=store)
    if mode == "cockpit-economy":
        return CockpitRunner(work, model_name=model_name, interval=None, max_gb=max_gb)
    if mode == "cockpit-economy-16":
        return CockpitRunner(work, model_name=model_name, interval=16, max_gb=max_gb)
    raise ValueError(mode)


def worker(conn, mode: str, quick: bool, seed: int, threads: int, max_gb: float, cpu: int | None,
           tune_malloc: bool) -> None:
    """One process per mode and model. Requests, answered in order:
    ("model", (name, store)) builds that workload and opens the mode's context;
    ("steps", n) times n steps; ("close", None) closes the context; ("exit", None)."""
    if tune_malloc:
        _tune_malloc()
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore")        # Cockpit/BackPACK warn on every tracked step
    runner = None
    while True:
        command, arg = conn.recv()
        if command == "exit":
            return
        try:
            if command == "model":
                runner = None
                name, store = arg
                torch.manual_seed(seed)
                runner = make_runner(mode, BUILDERS[name](quick), name, store, max_gb)
                runner.setup()
                conn.send(("ready", runner.heavy_fraction))
            elif command == "close":
                current, runner = runner, None
                conn.send(("ok", current.close()))
            else:
                times, heavy = [], []
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                for _ in range(arg):
                    start = time.perf_counter()
                    heavy.append(runner.step())
                    times.append(time.perf_counter() - start)
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
                conn.send(("ok", (times, heavy, faults)))
        except Skip as why:
            runner = None
            conn.send(("skip", str(why)))
        except Exception:
            conn.send(("error", traceback.format_exc()))


# -- the main process: start workers, warm up, interleave rounds ---------------------------
class Worker:
    """The main process's end of one mode's worker; restarted if it died."""

    def __init__(self, ctx, mode: str, args: argparse.Namespace) -> None:
        self.ctx, self.mode, self.args = ctx, mode, args
        self.proc = None
        self.start()

    def start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        a = self.args
        self.proc = self.ctx.Process(target=worker, daemon=True,
                                     args=(child, self.mode, a.quick, a.seed, a.threads, a.cockpit_max_gb,
                                           a.cpu, not a.keep_malloc))
        self.proc.start()
        child.close()

    def send(self, command: str, arg=None) -> None:
        if not self.proc.is_alive():
            self.start()
        self.conn.send((command, arg))

    def answer(self):
        try:
            return self.conn.recv()
        except EOFError:
            self.proc.join(5)
            return "error", f"worker process died (exit code {self.proc.exitcode}; killed for memory?)\n"

    def ask(self, command: str, arg=None):
        self.send(command, arg)
        return self.answer()

    def stop(self) -> None:
        try:
            self.conn.send(("exit", None))
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


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


@dataclass
class Result:
    model: str
    plain_ms: float
    modes: dict[str, ModeResult]      # absent: skipped
    notes: list[str]


def _fail(name: str, mode: str, text: str, when: str, notes: list[str]) -> None:
    print(f"\n[{name}] mode '{mode}' failed {when}; skipping it for this model:\n{text}", file=sys.stderr)
    notes.append(f"{name}/{mode}: failed {when} (traceback above); skipped")
    if mode == "plain":
        raise RuntimeError(f"plain training failed on {name}")


def bench_model(name: str, workers: dict[str, Worker], args: argparse.Namespace, store_dir: str) -> Result:
    notes: list[str] = []
    t0 = time.perf_counter()
    for mode, w in workers.items():                  # all build in parallel
        w.send("model", (name, os.path.join(store_dir, f"{name}-{mode}.db")))
    live: list[str] = []
    fraction: dict[str, float] = {}                 # share of heavy steps, as the worker reports it
    for mode, w in workers.items():
        status, payload = w.answer()
        if status == "ready":
            live.append(mode)
            fraction[mode] = payload
        elif status == "skip":
            notes.append(f"{name}/{mode}: {payload}")
        else:
            _fail(name, mode, payload, "while setting up", notes)

    # Warm-up, one worker at a time, a step at a time (to stop a very slow mode early).
    t1 = time.perf_counter()
    warm: dict[str, tuple[list[float], list[bool]]] = {}
    slow: list[str] = []
    for mode in list(live):
        times, heavy = [], []
        # A slow periodic mode steps on (a few at most) until a light step is seen too.
        while len(times) < args.warmup or (mode in slow and all(heavy) and len(times) < args.warmup + 4):
            status, payload = workers[mode].ask("steps", 1)
            if status != "ok":
                _fail(name, mode, payload, "during warm-up", notes)
                live.remove(mode)
                workers[mode].ask("close")
                break
            times += payload[0]
            heavy += payload[1]
            if payload[0][0] > args.max_step_s and mode != "plain":
                if mode not in slow:
                    slow.append(mode)
                if mode not in PERIODIC:
                    break          # a uniform mode: one step says enough
        if mode in live:
            warm[mode] = (times, heavy)
    if "plain" not in live:
        raise RuntimeError(f"plain training failed on {name}")
    plain_warm = statistics.median(warm["plain"][0])

    results: dict[str, ModeResult] = {}
    for mode in slow:                                 # estimated from the warm-up, then let go
        times, heavy = warm[mode]
        est = _amortize(fraction[mode], [t for t, h in zip(times, heavy) if not h],
                        [t for t, h in zip(times, heavy) if h])
        results[mode] = ModeResult(ms=1e3 * est, ratio=est / plain_warm, mark="~", info={"warm": times},
                                   fraction=fraction[mode])
        notes.append(f"{name}/{mode}: a warm-up step took {max(times):.1f} s (over --max-step-s "
                     f"{args.max_step_s:g}); not timed in rounds, estimated from {len(times)} warm-up step(s): "
                     f"~{est * 1e3:.0f} ms/step, ~{est / plain_warm:.0f}x")
        live.remove(mode)
        workers[mode].ask("close")

    # Plain and the periodic modes need many timed steps (to hold the rare heavy ones);
    # the uniform modes time shorter blocks, and slow ones about two plain blocks' worth.
    block = {}
    for mode in live:
        per_step = statistics.median(warm[mode][0])
        block[mode] = args.steps
        if mode != "plain" and mode not in PERIODIC and per_step > 2 * plain_warm:
            block[mode] = max(1, min(args.steps, round(2 * args.steps * plain_warm / per_step)))

    t2 = time.perf_counter()
    times: dict[str, list[list[float]]] = {m: [] for m in live}
    heavy: dict[str, list[list[bool]]] = {m: [] for m in live}
    faults: dict[str, int] = {m: 0 for m in live}     # minor page faults while timed
    for _ in range(args.rounds):
        for mode in list(live):
            status, payload = workers[mode].ask("steps", block[mode])
            if status != "ok":
                _fail(name, mode, payload, "while timed", notes)
                live.remove(mode)
                times.pop(mode)
                workers[mode].ask("close")
                continue
            times[mode].append(payload[0])
            heavy[mode].append(payload[1])
            faults[mode] += payload[2]

    t3 = time.perf_counter()
    infos = {}
    for mode in live:
        status, payload = workers[mode].ask("close")
        infos[mode] = payload if status == "ok" else {"close_error": payload}
        if status != "ok":
            print(f"\n[{name}] closing mode '{mode}' failed:\n{payload}", file=sys.stderr)
            notes.append(f"{name}/{mode}: closing failed (traceback above)")
    # watch-every-1 first: a sampled step of watch-default does the same work as any of its
    # steps, so its ratio stands in when no sampled step of watch-default was timed.
    for mode in sorted(live, key=lambda m: m != "watch-every-1"):
        every_1 = results.get("watch-every-1") if mode == "watch-default" else None
        stand_in = (every_1.ratio, every_1.ms) if every_1 is not None and not every_1.mark else None
        results[mode] = _summarize(mode, fraction[mode], times[mode], heavy[mode], times["plain"], warm[mode],
                                   infos[mode], stand_in)
        results[mode].block = block[mode]
        results[mode].faults = faults[mode] / max(1, results[mode].timed)
    print(f"  {name}: set-up {t1 - t0:.1f}s, warm-up {t2 - t1:.1f}s, rounds {t3 - t2:.1f}s",
          file=sys.stderr, flush=True)
    return Result(name, results["plain"].ms, results, notes)


def _mean(xs):
    return sum(xs) / len(xs)


def _p10(xs: list[float]) -> float:
    """10th percentile: extra load from other processes only ever adds time to a step."""
    return statistics.quantiles(xs, n=10)[0] if len(xs) > 1 else xs[0]


def _amortize(f: float, light: list[float], heavy: list[float]) -> float:
    """Seconds per step with heavy steps in their share f of a long run."""
    if not heavy or not light:
        return statistics.median(light or heavy)
    return (1 - f) * statistics.median(light) + f * _mean(heavy)


def _summarize(mode: str, f: float, rounds: list[list[float]], rounds_heavy: list[list[bool]],
               plain: list[list[float]], warm: tuple[list[float], list[bool]], info: dict,
               stand_in: tuple[float, float] | None = None) -> ModeResult:
    # Each round's reference: the plain blocks of this round and the next, which bracket
    # this mode's block in time (the load of a shared machine drifts within a round).
    plain_means = [_mean(r) for r in plain]
    plain_means = [(a + b) / 2 for a, b in zip(plain_means, plain_means[1:])] + plain_means[-1:]
    all_steps = [t for r in rounds for t in r]
    plain_steps = [t for r in plain for t in r]
    total_ratio = _mean(all_steps) / _mean(plain_steps)
    res = ModeResult(total_ratio=total_ratio, timed=len(all_steps), info=info, fraction=f)
    if mode not in PERIODIC:
        res.ms = 1e3 * statistics.median(_mean(r) for r in rounds)
        per_round = [_mean(r) / p for r, p in zip(rounds, plain_means)]
        res.ratio = 1.0 if mode == "plain" else statistics.median(per_round)
        res.spread = iqr(per_round) if mode != "plain" else (float("nan"), float("nan"))
        res.p10_ratio = _p10(all_steps) / _p10(plain_steps)
        return res
    light_ms, light_ratio, heavy_s, heavy_ratio = [], [], [], []
    for r, h, p in zip(rounds, rounds_heavy, plain_means):
        light = [t for t, is_heavy in zip(r, h) if not is_heavy]
        if light:
            light_ms.append(_mean(light))
            light_ratio.append(_mean(light) / p)
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
        res.heavy_ms = 1e3 * _mean(heavy_s)
        res.ratio = (1 - f) * r_light + f * _mean(heavy_ratio)
        light_steps = [t for r, h in zip(rounds, rounds_heavy) for t, is_heavy in zip(r, h) if not is_heavy]
        res.p10_ratio = (1 - f) * _p10(light_steps) / _p10(plain_steps) + f * _mean(heavy_ratio)
        res.ms = 1e3 * ((1 - f) * ms_light + f * _mean(heavy_s))
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
            for key in ("findings_error", "store_error", "close_error"):
                if i.get(key):
                    text += f"; {key}: {i[key].strip().splitlines()[-1]}"
            out.append(text)
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(BUILDERS),
                   help=f"comma-separated subset of {','.join(BUILDERS)} (default: all)")
    p.add_argument("--modes", default=",".join(MODES[1:]),
                   help=f"comma-separated subset of {','.join(MODES[1:])} (plain always runs)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 20; 6 with --quick)")
    p.add_argument("--steps", type=int, default=None,
                   help="steps per timed block (default 5; 3 with --quick); rounds x steps >= "
                        f"{DEFAULT_EVERY} puts a sampled step of watch-default among the timed ones")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps per mode (default 3; 2 with --quick)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) in each worker (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu", type=int, default=None,
                   help="pin every worker to this CPU (default: the lowest one this process may use; -1: "
                        "no pinning). One CPU for all: on a shared machine, workers left to the scheduler "
                        "can settle on different cores, one busier than the other, and differ for that alone")
    p.add_argument("--max-step-s", type=float, default=2.0,
                   help="a mode whose warm-up step takes longer is estimated, not timed (default 2)")
    p.add_argument("--cockpit-max-gb", type=float, default=1.0,
                   help="skip Cockpit where per-sample gradients would exceed this many GB (default 1)")
    p.add_argument("--keep-malloc", action="store_true",
                   help="leave glibc malloc at its defaults in the workers (by default they call "
                        "mallopt(M_TRIM_THRESHOLD, 1 GiB) and mallopt(M_TOP_PAD, 256 MiB))")
    p.add_argument("--quick", action="store_true", help="smaller models and fewer rounds, for a smoke run")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = p.parse_args(argv)
    args.rounds = args.rounds or (6 if args.quick else 20)
    args.steps = args.steps or (3 if args.quick else 5)
    args.warmup = args.warmup or (2 if args.quick else 3)
    if args.cpu is None:
        args.cpu = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else -1
    if args.cpu < 0 or args.threads > 1:
        args.cpu = None    # several threads need several cores
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in BUILDERS]
    if unknown or not names:
        p.error(f"unknown model(s) {unknown}; choose from {','.join(BUILDERS)}")
    args.models = names
    modes = [m.strip() for m in args.modes.split(",") if m.strip() and m.strip() != "plain"]
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error(f"unknown mode(s) {bad}; choose from {','.join(MODES[1:])}")
    args.modes = ["plain"] + [m for m in MODES if m in modes]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = list(args.modes)
    notes: list[str] = []
    if any(m in modes for m in COCKPIT_MODES):
        missing = [pkg for pkg in ("cockpit", "backpack") if importlib.util.find_spec(pkg) is None]
        why = f"{' and '.join(missing)} not installed (pip install cockpit-for-pytorch backpack-for-pytorch)"
        if not missing:
            try:
                import_cockpit()   # once here, so that forked workers start with it imported
            except Exception as exc:
                why = f"importing Cockpit failed: {type(exc).__name__}: {exc}"
                missing = ["cockpit"]
        if missing:
            notes.append(f"Cockpit modes skipped: {why}")
            print(f"note: Cockpit modes skipped: {why}", flush=True)
            modes = [m for m in modes if m not in COCKPIT_MODES]
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
    # fork: a worker starts at once with torch and leaky already imported (this process runs
    # no torch op, so no thread pool exists to break). spawn where there is no fork.
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    store_dir = tempfile.mkdtemp(prefix="leaky-watch-bench-")
    t0 = time.perf_counter()
    results = []
    try:
        for name in args.models:
            # Fresh workers per model: a process's earlier models change its allocator state
            # (after the CNN, the LSTM took ~5000 page faults and 40% longer per step).
            workers = {m: Worker(ctx, m, args) for m in modes}
            try:
                results.append(bench_model(name, workers, args, store_dir))
            finally:
                for w in workers.values():
                    w.stop()
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
    all_notes = notes + [n for r in results for n in r.notes] + watch_notes(results)
    if all_notes:
        print("\nnotes:")
        for note in all_notes:
            print(f"  - {note}")
    print()
    for mode, target in TARGETS.items():
        over = [r.model for r in results if mode in r.modes and r.modes[mode].ratio > target]
        measured = [r.model for r in results if mode in r.modes]
        if not measured:
            continue
        above = [f"{r.model} ({r.modes[mode].ratio:.3f}x)" for r in results if r.model in over]
        verdict = f"above target on {', '.join(above)}" if over else "within target on all"
        print(f"{mode}: target <= {target:g}x: {verdict} ({len(measured)} model(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
