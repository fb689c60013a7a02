"""The harness of the benchmarks that time each mode in its own process (overhead.py,
watch_overhead.py); their tables are printed by _tables.py.

    options = WorkerOptions(quick=True, seed=0, threads=1, cpu=idlest_cpu(), malloc={...}, ...)
    with worker_pool(modes, options, make_runner) as workers:   # one process per mode
        timing = time_model("cnn", workers, plan)               # set up, warm up, rounds, close
    reference = bracketing_reference(plain_block_means)         # what a round's blocks divide by

Why a process per mode: `leaky.watch()` instruments the whole process (Tensor.backward, the
global optimizer hooks, a torch-function mode), so a watch open next to plain training would
observe it too. The front-ends open a fresh pool for each model, so that no model's
allocation history shapes the next one's. Workers are forked: they start at once, with
torch and leaky imported (the main process runs no torch op, so there is no thread pool to
break); spawned where there is no fork. Each worker is pinned to one CPU (the same for all;
by default `idlest_cpu`, so that none shares a core with another pinned benchmark) and sets
glibc's malloc with mallopt (the settings are the front-end's: see its docstring).

The protocol, main process -> worker, each request answered in order:
    ("model", name)                 build the workload from the seed and set the mode up:
                                    ("ok", heavy share of a long run) or ("skip", why)
    ("block", (n, untimed_first))   time n steps, each on its own: ("ok", Block)
    ("close", None)                 close the mode (a watch's exit): ("ok", info dict)
    ("exit", None)                  the worker returns
A failure answers ("error", traceback); so does a worker that died.

One model's run (`time_model`): every worker sets up at once; each warms up alone, a step at
a time, and a mode whose warm-up step takes over `max_step_s` is not timed in rounds (the
front-end estimates it from its warm-up); a mode over 2x slower than plain times shorter
blocks, about two plain blocks' worth (at least one step), except the periodic modes (their
rare heavy steps need the long blocks) and those given a length of their own; then the
rounds (plain, mode, mode, ..., plain, ...), one block per mode each, one worker computing
at a time; then every mode is closed. A mode that fails is skipped for the model, with its
traceback printed; plain failing ends the run.
"""
from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3     # glibc mallopt() parameters (malloc.h)


class Skip(Exception):
    """A mode that cannot run on a model; the message says why (printed as a note)."""


@dataclass
class WorkerOptions:
    """What every worker process starts with."""
    quick: bool                 # the smaller --quick workloads
    seed: int                   # torch.manual_seed before building each model
    threads: int                # torch.set_num_threads in the worker
    cpu: int | None             # the CPU every worker is pinned to; None: not pinned
    malloc: dict[int, int]      # mallopt(parameter, value) at start; empty: glibc's defaults
    store_dir: str | None       # where a watch keeps its SQLite store; None: no store
    cockpit_max_gb: float       # Cockpit is skipped where per-sample gradients exceed this


@dataclass
class Plan:
    """How each model's modes are timed."""
    rounds: int                 # interleaved timing rounds
    steps: int                  # steps per timed block
    warmup: int                 # warm-up steps per mode
    max_step_s: float           # a mode whose warm-up step takes longer is not timed in rounds
    untimed_first: bool = False  # each block (a warm-up step's too) starts with one untimed step
    lengths: dict[str, int] = field(default_factory=dict)   # blocks of other than `steps` steps, kept
    periodic: tuple[str, ...] = ()   # rare heavy steps: blocks never shortened; warm up to a light step


class Block(NamedTuple):
    """One timed block, as a worker reports it."""
    times: list[float]          # seconds, per step
    heavy: list[int]            # per step: the heavy events in it (steps sampled, tracked); 0: light
    faults: int                 # minor page faults over the timed steps
    exit_s: float               # leaving the block's context (audit, detect_anomaly); ~0 without one


@dataclass
class ModelTiming:
    """What `time_model` measured on one model, for a front-end to summarize."""
    live: list[str] = field(default_factory=list)         # modes timed in rounds, plain first
    fraction: dict[str, float] = field(default_factory=dict)   # heavy share per mode (worker's)
    warm: dict[str, tuple[list[float], list[int]]] = field(default_factory=dict)  # (times, heavy)
    slow: list[str] = field(default_factory=list)         # estimated from the warm-up, not timed
    block: dict[str, int] = field(default_factory=dict)   # steps per timed block
    blocks: dict[str, list[Block]] = field(default_factory=dict)   # one per round
    infos: dict[str, dict] = field(default_factory=dict)  # what closing each mode returned
    notes: list[str] = field(default_factory=list)


@dataclass
class Result:
    """One model's row: the front-end's result per mode (absent: skipped) and its notes."""
    model: str
    plain_ms: float
    modes: dict
    notes: list[str]


# -- the worker process ---------------------------------------------------------------------
def tune_malloc(settings: dict[int, int]) -> bool:
    """mallopt(parameter, value) for each setting, as glibc's MALLOC_*_ environment variables
    would at start (any of them also stops glibc moving its mmap threshold). False elsewhere."""
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        return all(libc.mallopt(param, value) == 1 for param, value in settings.items())
    except (OSError, AttributeError):
        return False


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_block(runner, n: int, untimed_first: bool) -> Block:
    """n steps inside the runner's per-block context, each timed on its own, the context's
    exit timed apart. `untimed_first`: one step of the mode before (outside the context): the
    first step after the other workers ran on this CPU is slower."""
    if untimed_first:
        runner.step()
    context = runner.context()
    context.__enter__()
    times, heavy = [], []
    try:
        faults = _minor_faults()
        for _ in range(n):
            start = time.perf_counter()
            heavy.append(runner.step())
            times.append(time.perf_counter() - start)
        faults = _minor_faults() - faults
    finally:
        end = time.perf_counter()
        context.__exit__(None, None, None)
    exit_s = time.perf_counter() - end
    runner.after_block(context)
    return Block(times, heavy, faults, exit_s)


def serve(conn, mode: str, options: WorkerOptions, make_runner) -> None:
    """A worker process: one mode, driven over `conn` (the protocol in the module docstring);
    make_runner(mode, model, options) builds the mode's runner for a model."""
    if options.malloc:
        tune_malloc(options.malloc)
    if options.cpu is not None:
        os.sched_setaffinity(0, {options.cpu})
    torch.set_num_threads(options.threads)
    warnings.filterwarnings("ignore")     # detect_anomaly and Cockpit warn on every entry/step
    runner = None
    while True:
        try:
            command, arg = conn.recv()
        except EOFError:   # the main process is gone
            return
        if command == "exit":
            return
        try:
            if command == "model":
                runner = None
                runner = make_runner(mode, arg, options)
                runner.setup()
                conn.send(("ok", runner.heavy_fraction))
            elif command == "block":
                conn.send(("ok", time_block(runner, *arg)))
            elif command == "close":
                current, runner = runner, None
                conn.send(("ok", current.close()))
        except Skip as why:
            runner = None
            conn.send(("skip", str(why)))
        except Exception:
            conn.send(("error", traceback.format_exc()))


# -- the main process ---------------------------------------------------------------------
class Worker:
    """The main process's end of one mode's worker."""

    def __init__(self, ctx, mode: str, options: WorkerOptions, make_runner) -> None:
        self.mode = mode
        self.conn, child = ctx.Pipe()
        # NOTE: not a daemon: a workload's DataLoader starts worker processes of its own, which a
        # daemon may not; a worker ends at "exit" (stop) or when the main process is gone (EOF)
        self.proc = ctx.Process(target=serve, args=(child, mode, options, make_runner), daemon=False)
        self.proc.start()
        child.close()

    def send(self, command: str, arg=None) -> None:
        with contextlib.suppress(OSError):      # a dead worker: answer() says so
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
        self.send("exit")
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


@contextlib.contextmanager
def worker_pool(modes: list[str], options: WorkerOptions, make_runner, start_method: str | None = None):
    """One worker per mode, {mode: Worker}; all stopped on exit. `start_method`: "spawn" where
    the workers use CUDA (a forked process cannot); by default fork where there is one."""
    ctx = mp.get_context(start_method or ("fork" if "fork" in mp.get_all_start_methods() else "spawn"))
    if ctx.get_start_method() == "fork":
        # NOTE: torch.optim imports Dynamo when the first optimizer is built (3-5 s per process
        # on a busy 2-core machine): imported here, every forked worker inherits it.
        import torch._dynamo  # noqa: F401
    workers: dict[str, Worker] = {}
    try:
        for mode in modes:
            workers[mode] = Worker(ctx, mode, options, make_runner)
        yield workers
    finally:
        for worker in workers.values():
            worker.stop()


def _fail(name: str, mode: str, text: str, when: str, notes: list[str]) -> None:
    print(f"\n[{name}] mode '{mode}' failed {when}; skipping it for this model:\n{text}", file=sys.stderr)
    notes.append(f"{name}/{mode}: FAILED {when} (traceback on stderr); skipped")
    if mode == "plain":
        raise RuntimeError(f"plain training failed on {name}")


def _close(name: str, worker: Worker, notes: list[str]) -> dict:
    status, payload = worker.ask("close")
    if status == "ok":
        return payload
    print(f"\n[{name}] closing mode '{worker.mode}' failed:\n{payload}", file=sys.stderr)
    notes.append(f"{name}/{worker.mode}: closing FAILED (traceback on stderr)")
    return {"close_error": payload}


def _set_up(name: str, workers: dict[str, Worker], t: ModelTiming) -> None:
    for w in workers.values():                      # all build at once
        w.send("model", name)
    for mode, w in workers.items():
        status, payload = w.answer()
        if status == "ok":
            t.live.append(mode)
            t.fraction[mode] = payload
        elif status == "skip":
            t.notes.append(f"{name}/{mode}: skipped: {payload}")
        else:
            _fail(name, mode, payload, "while setting up", t.notes)


def _warm_up(name: str, workers: dict[str, Worker], plan: Plan, t: ModelTiming) -> None:
    """One worker at a time, a step at a time, to stop a very slow mode early; a slow
    periodic mode steps on (a few steps at most) until it has taken a light step too."""
    for mode in list(t.live):
        times: list[float] = []
        heavy: list[int] = []
        slow = False
        while len(times) < plan.warmup or (slow and all(heavy) and len(times) < plan.warmup + 4):
            status, payload = workers[mode].ask("block", (1, plan.untimed_first))
            if status != "ok":
                _fail(name, mode, payload, "during warm-up", t.notes)
                t.live.remove(mode)
                workers[mode].ask("close")
                break
            times += payload.times
            heavy += payload.heavy
            if mode != "plain" and payload.times[0] > plan.max_step_s:
                slow = True
                if mode not in plan.periodic:
                    break               # a uniform mode: one step says enough
        if mode not in t.live:
            continue
        t.warm[mode] = (times, heavy)
        if slow:                        # let go now; the front-end estimates it
            t.slow.append(mode)
            t.live.remove(mode)
            t.infos[mode] = _close(name, workers[mode], t.notes)


def _choose_blocks(plan: Plan, t: ModelTiming) -> None:
    plain = statistics.median(t.warm["plain"][0])
    for mode in t.live:
        length = plan.lengths.get(mode, plan.steps)
        per_step = statistics.median(t.warm[mode][0])
        fixed = mode == "plain" or mode in plan.periodic or mode in plan.lengths
        if not fixed and per_step > 2 * plain:
            length = max(1, min(length, round(2 * plan.steps * plain / per_step)))
        t.block[mode] = length


def _rounds(name: str, workers: dict[str, Worker], plan: Plan, t: ModelTiming) -> None:
    t.blocks = {m: [] for m in t.live}
    for _ in range(plan.rounds):
        for mode in list(t.live):
            status, payload = workers[mode].ask("block", (t.block[mode], plan.untimed_first))
            if status != "ok":
                _fail(name, mode, payload, "while timed", t.notes)
                t.live.remove(mode)
                t.blocks.pop(mode)
                workers[mode].ask("close")
                continue
            t.blocks[mode].append(payload)


def time_model(name: str, workers: dict[str, Worker], plan: Plan) -> ModelTiming:
    """Set every mode up on model `name`, warm up, time the rounds, close (module docstring)."""
    t = ModelTiming()
    t0 = time.perf_counter()
    _set_up(name, workers, t)
    t1 = time.perf_counter()
    _warm_up(name, workers, plan, t)
    _choose_blocks(plan, t)
    t2 = time.perf_counter()
    _rounds(name, workers, plan, t)
    t3 = time.perf_counter()
    for mode in t.live:
        t.infos[mode] = _close(name, workers[mode], t.notes)
    print(f"  {name}: set-up {t1 - t0:.1f}s, warm-up {t2 - t1:.1f}s, rounds {t3 - t2:.1f}s, "
          f"close {time.perf_counter() - t3:.1f}s", file=sys.stderr, flush=True)
    return t


# -- ratios and spread ----------------------------------------------------------------------
def mean(xs) -> float:
    return sum(xs) / len(xs)


def bracketing_reference(plain: list[float]) -> list[float]:
    """Each round's plain reference: the mean of its plain block and the next round's, which
    bracket the round's other blocks in time (the last round: its own)."""
    return [(a + b) / 2 for a, b in zip(plain, plain[1:])] + plain[-1:]


def iqr(xs: list[float]) -> tuple[float, float]:
    """The middle half of a list of per-round ratios: (25th, 75th percentile)."""
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (float("nan"), float("nan"))
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


# -- CPU ------------------------------------------------------------------------------------
def idlest_cpu(wait: float = 1.0) -> int:
    """The usable CPU with the most idle time over `wait` seconds (/proc/stat); another
    benchmark pinned to the lowest CPU would otherwise share it with every worker here."""
    if not hasattr(os, "sched_getaffinity"):
        return -1
    usable = sorted(os.sched_getaffinity(0))

    def idle() -> dict[int, int]:
        out = {}
        try:
            with open("/proc/stat") as f:
                for line in f:
                    name, *fields = line.split()
                    if name.startswith("cpu") and name[3:].isdigit():
                        out[int(name[3:])] = int(fields[3]) + int(fields[4])     # idle + iowait
        except (OSError, ValueError, IndexError):
            pass
        return out

    first = idle()
    time.sleep(wait)
    second = idle()
    gained = {c: second[c] - first[c] for c in usable if c in first and c in second}
    return max(gained, key=lambda c: (gained[c], -c)) if gained else usable[0]


# -- command line ---------------------------------------------------------------------------
def parser(doc: str, modes: tuple[str, ...], models: list[str], rounds: tuple[int, int],
           steps_help: str) -> argparse.ArgumentParser:
    """The flags both front-ends take; `rounds`: the default (full, --quick)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(models),
                   help=f"comma-separated subset of {','.join(models)} (default: all)")
    p.add_argument("--modes", default=",".join(modes[1:]),
                   help=f"comma-separated subset of {','.join(modes[1:])} (plain always runs)")
    p.add_argument("--rounds", type=int, default=None,
                   help=f"interleaved timing rounds (default {rounds[0]}; {rounds[1]} with --quick)")
    p.add_argument("--steps", type=int, default=None, help=f"steps per timed block (default 5; 3 with --quick); "
                                                           f"{steps_help}")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps per mode (default 3; 2 with --quick)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) in each worker (default 1)")
    p.add_argument("--cpu", type=int, default=None,
                   help="pin every worker to this CPU (default: the idlest usable one over a second, when "
                        "--threads is 1; -1: no pinning). One CPU for all: on a shared machine, workers left "
                        "to the scheduler can settle on different cores, one busier than the other, and "
                        "differ for that alone")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-step-s", type=float, default=2.0,
                   help="a mode whose warm-up step takes longer is estimated, not timed (default 2)")
    p.add_argument("--cockpit-max-gb", type=float, default=1.0,
                   help="skip Cockpit where per-sample gradients would exceed this many GB (default 1)")
    p.add_argument("--quick", action="store_true", help="smaller models and fewer rounds, for a smoke run")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None, modes: tuple[str, ...], models: list[str],
          rounds: tuple[int, int]) -> argparse.Namespace:
    """Parse; fill the defaults that depend on --quick, pick the CPU, check models and modes."""
    args = p.parse_args(argv)
    args.rounds = args.rounds or rounds[1 if args.quick else 0]
    args.steps = args.steps or (3 if args.quick else 5)
    args.warmup = args.warmup or (2 if args.quick else 3)
    if args.cpu is None:
        args.cpu = idlest_cpu()
    if args.cpu < 0 or args.threads > 1:
        args.cpu = None                  # several threads need several cores
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in models]
    if unknown or not names:
        p.error(f"unknown model(s) {unknown}; choose from {','.join(models)}")
    args.models = names
    chosen = [m.strip() for m in args.modes.split(",") if m.strip() and m.strip() != "plain"]
    bad = [m for m in chosen if m not in modes]
    if bad:
        p.error(f"unknown mode(s) {bad}; choose from {','.join(modes[1:])}")
    args.modes = [m for m in modes if m == "plain" or m in chosen]
    return args
