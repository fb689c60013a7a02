"""Run: python benchmarks/overhead.py [--quick]   (from the repository root)

    python benchmarks/overhead.py --quick                     # smoke run, ~1-2 min on 2 cores
    python benchmarks/overhead.py --markdown                  # full run, 4-6 min on 2 shared cores
    python benchmarks/overhead.py --models cnn,lstm --rounds 9

Every way of looking at a training step, in one table: ms/step and the ratio to a plain
step for each model of audit_overhead.py (MLP, CNN, LSTM, Transformer, built from the same
seed), under

  audit          leaky.audit(steps=None), entered and left once per timed block (as in
                 audit_overhead.py); leaving it (folding the statistics) is timed apart
  watch-default  leaky.watch(every=DEFAULT_EVERY, store=<temp file>), opened once per model and
                 kept open through the warm-up and every timed block
  watch-every-1  leaky.watch(every=1, store=<temp file>), the same
  anomaly        torch.autograd.detect_anomaly(), once per timed block
  naive-item     after backward, log[name] = p.grad.norm().item() for every parameter
  cockpit        Cockpit (cockpit-for-pytorch) with configuration("economy"), every step
  plain-b        plain again, in its own worker: an A/A control; its ratio is what this
                 machine's noise and the worker processes alone do to a ratio

Targets: audit <= 2x, watch-default <= 1.02x, watch-every-1 <= 1.15x a plain step.

`leaky.watch()` instruments the whole process (Tensor.backward, the global optimizer hooks,
a torch-function mode): a watch open in this process would observe every other mode's
steps too. So each mode runs in its own worker process, spawned afresh for each model (so
that one model's allocation history does not slow the next), with --threads torch threads,
all pinned to one CPU when --threads is 1 (so that none settles on a busier core; by
default the CPU that was idlest over a second at the start). A worker builds the model's
workload from the same seed and keeps it (and the watch) for all that model's blocks. The
main process interleaves the workers in rounds (plain, audit, watch-default, ..., plain,
...); one worker computes at a time, the others wait on a pipe.

Memory allocation: glibc's malloc moves its mmap threshold with each process's own history
of allocations, so two processes running the same step can differ by 10-15% for good (large
tensors come from fresh mmap'd pages in one and from the heap in the other). Unless
--default-malloc is given, the workers start with MALLOC_MMAP_THRESHOLD_=32 MiB and
MALLOC_TRIM_THRESHOLD_=128 MiB, which fixes the threshold: the same for every mode.

Block sizes: --steps per block for every mode but watch-default, whose block is DEFAULT_EVERY
steps: one whole sampling period, so every block holds exactly one sampled (fully audited)
step, in the proportion it has in a long run (the script checks the count). A mode much
slower than plain (Cockpit) times shorter blocks (at least one step); one whose warm-up
step takes over --max-step-s is not timed in rounds, its ratio estimated from the warm-up
('~').

Every block starts with one untimed step of the mode (for audit and anomaly, a plain step
before the context is entered, so that entering it and its first step are timed): the other
workers have just run on the same CPU, and the first step after that is slower; a block of
3-5 steps would pay that in full, a 100-step block hardly (on the --quick LSTM, 2.4 ms a
step, that alone made watch-default look 20% faster than plain). The 100 timed steps of a
watch-default block still hold exactly one sampled step.

Each round's reference is the mean plain step of that round's plain block and the next
round's (they bracket the other blocks in time). A mode's ratio is the median over rounds of
(its mean step in the block / the reference); its ms/step is the median block mean. A second
table gives the spread (interquartile range) of the per-round ratios, this run's noise.

Cockpit runs only if `import cockpit` works. Cockpit 1.0.2 imports pkg_resources (removed
from recent setuptools) only to read its own version; if that is the only thing missing, a
stub stands in for it. Cockpit's economy quantities need per-sample gradients (batch x
parameters floats): over --cockpit-max-gb the model is skipped for it; and BackPACK supports
only some layers (not MultiheadAttention, LayerNorm, a bare nn.Parameter).
If a mode fails on a model, its traceback is printed and the mode is skipped for it.
"""
from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import shutil
import statistics
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
from _shared import CockpitLoop, Skip, cockpit_available, naive_step, iqr, print_table  # noqa: E402

MODES = ("plain", "audit", "watch-default", "watch-every-1", "anomaly", "naive-item", "cockpit", "plain-b")
LABELS = {"plain-b": "plain again (A/A)", "audit": "audit", "watch-default": f"watch every={DEFAULT_EVERY}",
          "watch-every-1": "watch every=1",
          "anomaly": "detect_anomaly", "naive-item": "naive .item() hooks", "cockpit": "Cockpit economy"}
TARGETS = {"audit": 2.0, "watch-default": 1.02, "watch-every-1": 1.15}


# -- the modes, run inside a worker process ---------------------------------------------
class Runner:
    """Plain training; subclasses add what they measure. block(n) runs n steps and returns
    (seconds per step, exit seconds, sampled steps in the block)."""

    def __init__(self, work: Workload, name: str, args: dict) -> None:
        self.work, self.name, self.args = work, name, args
        self.info: dict = {}

    def setup(self) -> None:
        pass

    def step(self) -> None:
        self.work.step()

    def context(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def block(self, n: int) -> tuple[float, float, int]:
        self.step()          # untimed: the other workers just ran on this CPU (see the docstring)
        ctx = self.context()
        ctx.__enter__()
        try:
            start = time.perf_counter()
            for _ in range(n):
                self.step()
            per_step = (time.perf_counter() - start) / n
        finally:
            end = time.perf_counter()
            ctx.__exit__(None, None, None)
        exit_s = time.perf_counter() - end
        self.after_block(ctx)
        return per_step, exit_s, 0

    def after_block(self, ctx) -> None:
        pass

    def close(self) -> dict:
        return self.info


class AuditRunner(Runner):
    def context(self):
        return leaky.audit(steps=None)

    def after_block(self, audit) -> None:
        self.info["ops"] = len(audit.recorder.sites.sites)
        self.info["steps_recorded"] = getattr(getattr(audit, "stats", None), "steps", None)
        if audit.recorder.error and "error" not in self.info:
            self.info["error"] = audit.recorder.error


class AnomalyRunner(Runner):
    def context(self):
        return torch.autograd.detect_anomaly()


class NaiveRunner(Runner):
    def __init__(self, *a) -> None:
        super().__init__(*a)
        self.log: dict[str, float] = {}

    def step(self) -> None:
        naive_step(self.work, self.log)


class WatchRunner(Runner):
    """One leaky.watch open from setup to close."""

    def __init__(self, work, name, args, every: int) -> None:
        super().__init__(work, name, args)
        self.every = every
        self.run = None

    def setup(self) -> None:
        store = os.path.join(self.args["store_dir"], f"{self.name}-every{self.every}.db") \
            if self.args["store_dir"] else None
        self.run = leaky.watch(every=self.every, store=store).__enter__()

    def block(self, n: int) -> tuple[float, float, int]:
        self.work.step()     # untimed, as for the other modes; the n timed steps that follow
        before = self.run.recorder.steps_done        # count of sampled (folded) steps
        start = time.perf_counter()
        for _ in range(n):
            self.work.step()
        per_step = (time.perf_counter() - start) / n
        return per_step, 0.0, self.run.recorder.steps_done - before

    def close(self) -> dict:
        start = time.perf_counter()
        self.run.__exit__(None, None, None)
        self.info["exit_s"] = time.perf_counter() - start
        self.info["sampled"] = getattr(getattr(self.run, "stats", None), "steps", None)
        self.info["steps"] = self.run.recorder.step
        if self.run.recorder.error:
            self.info["error"] = self.run.recorder.error
        try:
            self.info["findings"] = sorted({f.code for f in self.run.findings})
        except Exception:
            self.info["error"] = (self.info.get("error") or "") + " findings: " + traceback.format_exc()
        return self.info


class CockpitRunner(Runner):
    """Cockpit's economy configuration, tracked every step (see _peers.CockpitLoop)."""

    def setup(self) -> None:
        self.loop = CockpitLoop(self.work, self.name, 1, self.args["cockpit_max_gb"])

    def step(self) -> None:
        self.loop.step()


def make_runner(mode: str, work: Workload, name: str, args: dict) -> Runner:
    if mode == "watch-default":
        return WatchRunner(work, name, args, DEFAULT_EVERY)
    if mode == "watch-every-1":
        return WatchRunner(work, name, args, 1)
    cls = {"plain": Runner, "plain-b": Runner, "audit": AuditRunner, "anomaly": AnomalyRunner,
           "naive-item": NaiveRunner, "cockpit": CockpitRunner}[mode]
    return cls(work, name, args)


def worker(conn, mode: str, args: dict) -> None:
    """One process per mode. Requests: ("model", name) builds the workload and sets the mode
    up; ("block", n) runs and times n steps; ("close", None); ("exit", None)."""
    if args["cpu"] is not None:
        os.sched_setaffinity(0, {args["cpu"]})
    torch.set_num_threads(args["threads"])
    warnings.filterwarnings("ignore")     # detect_anomaly and Cockpit warn on every entry/step
    runner = None
    while True:
        command, arg = conn.recv()
        if command == "exit":
            return
        try:
            if command == "model":
                runner = None
                torch.manual_seed(args["seed"])
                runner = make_runner(mode, BUILDERS[arg](args["quick"]), arg, args)
                runner.setup()
                conn.send(("ok", None))
            elif command == "block":
                conn.send(("ok", runner.block(arg)))
            elif command == "close":
                current, runner = runner, None
                conn.send(("ok", current.close()))
        except Skip as why:
            runner = None
            conn.send(("skip", str(why)))
        except Exception:
            conn.send(("error", traceback.format_exc()))


class Worker:
    def __init__(self, ctx, mode: str, args: dict) -> None:
        self.mode = mode
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker, args=(child, mode, args), daemon=True)
        self.proc.start()
        child.close()

    def send(self, command: str, arg=None) -> None:
        self.conn.send((command, arg))

    def answer(self):
        try:
            return self.conn.recv()
        except EOFError:
            self.proc.join(5)
            raise RuntimeError(f"worker for {self.mode} died (exit code {self.proc.exitcode}; out of memory?)")

    def ask(self, command: str, arg=None):
        self.send(command, arg)
        return self.answer()

    def stop(self) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            self.conn.send(("exit", None))
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


# -- the main process ---------------------------------------------------------------------
@dataclass
class ModeResult:
    ms: float = float("nan")
    ratio: float = float("nan")
    spread: tuple[float, float] = (float("nan"), float("nan"))   # IQR of per-round ratios
    mark: str = ""          # "~": estimated from warm-up steps
    block: int = 0
    timed: int = 0
    sampled: list[int] = field(default_factory=list)   # watch: sampled steps per timed block
    exit_ms: float = float("nan")
    info: dict = field(default_factory=dict)


@dataclass
class Result:
    model: str
    plain_ms: float
    modes: dict[str, ModeResult]
    notes: list[str]


def _fail(name: str, mode: str, text: str, when: str, notes: list[str]) -> None:
    print(f"\n[{name}] mode '{mode}' failed {when}; skipping it for this model:\n{text}", file=sys.stderr)
    notes.append(f"{name}/{mode}: FAILED {when} (traceback printed); skipped")
    if mode == "plain":
        raise RuntimeError(f"plain training failed on {name}")


def bench_model(name: str, workers: dict[str, Worker], args: argparse.Namespace) -> Result:
    notes: list[str] = []
    t0 = time.perf_counter()
    for w in workers.values():                      # all build at once
        w.send("model", name)
    live = []
    for mode, w in workers.items():
        status, payload = w.answer()
        if status == "ok":
            live.append(mode)
        elif status == "skip":
            notes.append(f"{name}/{mode}: skipped: {payload}")
        else:
            _fail(name, mode, payload, "while setting up", notes)

    results: dict[str, ModeResult] = {}
    warm: dict[str, float] = {}
    for mode in list(live):                         # warm-up, one step at a time
        times = []
        for _ in range(args.warmup):
            status, payload = workers[mode].ask("block", 1)
            if status != "ok":
                _fail(name, mode, payload, "during warm-up", notes)
                live.remove(mode)
                workers[mode].ask("close")
                break
            times.append(payload[0])
            if mode != "plain" and payload[0] > args.max_step_s:
                break
        else:
            warm[mode] = statistics.median(times)
            continue
        if mode in live:                            # too slow to time in rounds
            est = statistics.median(times)
            results[mode] = ModeResult(ms=1e3 * est, ratio=est / warm["plain"], mark="~")
            notes.append(f"{name}/{mode}: a warm-up step took {times[-1]:.1f} s (over --max-step-s "
                         f"{args.max_step_s:g}): not timed in rounds; ~{1e3 * est:.0f} ms/step from "
                         f"{len(times)} warm-up step(s)")
            live.remove(mode)
            status, payload = workers[mode].ask("close")
            results[mode].info = payload if status == "ok" else {}

    block = {}
    for mode in live:
        block[mode] = DEFAULT_EVERY if mode == "watch-default" else args.steps
        if mode not in ("plain", "watch-default") and warm[mode] > 2 * warm["plain"]:
            block[mode] = max(1, min(args.steps, round(2 * args.steps * warm["plain"] / warm[mode])))

    t1 = time.perf_counter()
    per_step: dict[str, list[float]] = {m: [] for m in live}
    exits: dict[str, list[float]] = {m: [] for m in live}
    sampled: dict[str, list[int]] = {m: [] for m in live}
    for _ in range(args.rounds):
        for mode in list(live):
            status, payload = workers[mode].ask("block", block[mode])
            if status != "ok":
                _fail(name, mode, payload, "while timed", notes)
                live.remove(mode)
                per_step.pop(mode)
                workers[mode].ask("close")
                continue
            per_step[mode].append(payload[0])
            exits[mode].append(payload[1])
            sampled[mode].append(payload[2])

    t2 = time.perf_counter()
    plain = per_step["plain"]
    reference = [(a + b) / 2 for a, b in zip(plain, plain[1:])] + plain[-1:]
    for mode in live:
        status, payload = workers[mode].ask("close")
        if status != "ok":
            print(f"\n[{name}] closing mode '{mode}' failed:\n{payload}", file=sys.stderr)
            notes.append(f"{name}/{mode}: closing FAILED (traceback printed)")
            payload = {}
        ratios = [t / r for t, r in zip(per_step[mode], reference)]
        results[mode] = ModeResult(
            ms=1e3 * statistics.median(per_step[mode]),
            ratio=1.0 if mode == "plain" else statistics.median(ratios),
            spread=iqr(ratios) if mode != "plain" else (float("nan"), float("nan")),
            block=block[mode], timed=block[mode] * len(per_step[mode]), sampled=sampled[mode],
            exit_ms=1e3 * statistics.median(exits[mode]) if mode in ("audit", "anomaly") else
            1e3 * payload.get("exit_s", float("nan")),
            info=payload)
    print(f"  {name}: set-up {t1 - t0:.1f}s (incl. warm-up), rounds {t2 - t1:.1f}s, "
          f"close {time.perf_counter() - t2:.1f}s", file=sys.stderr, flush=True)
    return Result(name, results["plain"].ms, results, notes)


# -- output -----------------------------------------------------------------------------
def _cell(r: Result, mode: str) -> str:
    m = r.modes.get(mode)
    if m is None:
        return "skipped"
    digits = 0 if m.ratio >= 100 else 1 if m.ratio >= 10 else 2
    return f"{'~' if m.mark else ''}{m.ms:.1f} ({m.ratio:.{digits}f}x)"


def main_table(results: list[Result], modes: list[str]):
    header = ("model", "plain ms/step", *[f"{LABELS[m]} ms (ratio)" for m in modes[1:]])
    body = [(r.model, f"{r.plain_ms:.1f}", *[_cell(r, m) for m in modes[1:]]) for r in results]
    return header, body


def detail_table(results: list[Result], modes: list[str]):
    header = ("model", "mode", "ratio", "round ratios IQR", "steps/block", "steps timed", "sampled per block",
              "exit ms")
    body = []
    for r in results:
        for mode in modes[1:]:
            m = r.modes.get(mode)
            if m is None:
                body.append((r.model, mode, "skipped", "", "", "", "", ""))
                continue
            lo, hi = m.spread
            body.append((r.model, mode, f"{'~' if m.mark else ''}{m.ratio:.3f}x",
                         "" if lo != lo else f"{lo:.3f}-{hi:.3f}", str(m.block or ""), str(m.timed or "0 (est.)"),
                         ",".join(map(str, m.sampled)) if mode.startswith("watch") else "",
                         "" if m.exit_ms != m.exit_ms else f"{m.exit_ms:.1f}"))
    return header, body


def leaky_notes(results: list[Result]) -> list[str]:
    """What leaky itself recorded: a check that it observed without an internal error."""
    out = []
    for r in results:
        for mode in ("audit", "watch-default", "watch-every-1"):
            m = r.modes.get(mode)
            if m is None:
                continue
            i = m.info
            if mode == "audit":
                text = f"{r.model}/audit: {i.get('ops')} op sites per step"
            else:
                bad = [s for s in m.sampled if s != 1] if mode == "watch-default" else []
                text = (f"{r.model}/{mode}: {i.get('steps')} steps watched, {i.get('sampled')} sampled; "
                        f"findings: {', '.join(i.get('findings') or []) or 'none'}")
                if bad:
                    text += f"; WARNING: blocks with {bad} sampled steps (expected 1 each)"
            if i.get("error"):
                text += f"; LEAKY INTERNAL ERROR: {i['error']}"
            out.append(text)
    return out


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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(BUILDERS),
                   help=f"comma-separated subset of {','.join(BUILDERS)} (default: all)")
    p.add_argument("--modes", default=",".join(MODES[1:]),
                   help=f"comma-separated subset of {','.join(MODES[1:])} (plain always runs)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 5; 3 with --quick)")
    p.add_argument("--steps", type=int, default=None,
                   help=f"steps per timed block (default 5; 3 with --quick); watch-default: {DEFAULT_EVERY}")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps per mode (default 3; 2 with --quick)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) in each worker (default 1)")
    p.add_argument("--cpu", type=int, default=None,
                   help="pin all workers to this CPU (default: the idlest usable one over a second, when "
                        "--threads is 1; -1: no pinning)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc thresholds alone in the workers (see above)")
    p.add_argument("--no-store", action="store_true", help="watch without a SQLite store (default: a temp file)")
    p.add_argument("--max-step-s", type=float, default=2.0,
                   help="a mode whose warm-up step takes longer is estimated, not timed (default 2)")
    p.add_argument("--cockpit-max-gb", type=float, default=1.0,
                   help="skip Cockpit where per-sample gradients would exceed this many GB (default 1)")
    p.add_argument("--quick", action="store_true", help="smaller models, fewer rounds: a smoke run")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = p.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 5)
    args.steps = args.steps or (3 if args.quick else 5)
    args.warmup = args.warmup or (2 if args.quick else 3)
    if args.cpu is None:
        args.cpu = idlest_cpu()
    if args.cpu < 0 or args.threads > 1:
        args.cpu = None
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in BUILDERS]
    if unknown or not names:
        p.error(f"unknown model(s) {unknown}; choose from {','.join(BUILDERS)}")
    args.models = names
    modes = {m.strip() for m in args.modes.split(",") if m.strip()} - {"plain"}
    if modes - set(MODES):
        p.error(f"unknown mode(s) {sorted(modes - set(MODES))}; choose from {','.join(MODES[1:])}")
    args.modes = [m for m in MODES if m == "plain" or m in modes]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = list(args.modes)
    notes = []
    if "cockpit" in modes:
        ok, why = cockpit_available()
        if not ok:
            print(f"cockpit not installed: skipped ({why})", flush=True)
            modes.remove("cockpit")
        elif why:
            notes.append(why)
    print(f"torch {torch.__version__}, leaky {leaky.__version__}, threads {args.threads} per worker, "
          f"{'workers pinned to CPU ' + str(args.cpu) if args.cpu is not None else 'workers not pinned'}, "
          f"rounds {args.rounds}, steps/block {args.steps} (watch-default {DEFAULT_EVERY}), warm-up {args.warmup}"
          f"{', quick' if args.quick else ''}, malloc "
          f"{'default' if args.default_malloc else 'mmap threshold fixed'}", flush=True)
    print("targets: " + ", ".join(f"{LABELS[m]} <= {t:g}x" for m, t in TARGETS.items()), flush=True)
    store_dir = None if args.no_store else tempfile.mkdtemp(prefix="leaky-overhead-")
    shared = {"quick": args.quick, "seed": args.seed, "threads": args.threads, "cpu": args.cpu,
              "cockpit_max_gb": args.cockpit_max_gb, "store_dir": store_dir}
    if not args.default_malloc:      # inherited by the spawned workers
        os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(32 * 2**20))
        os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(128 * 2**20))
    ctx = mp.get_context("spawn")
    t0 = time.perf_counter()
    results = []
    try:
        for name in args.models:     # fresh workers per model: no model's allocations shape another's
            workers = {m: Worker(ctx, m, shared) for m in modes}
            try:
                results.append(bench_model(name, workers, args))
            finally:
                for w in workers.values():
                    w.stop()
    finally:
        if store_dir:
            shutil.rmtree(store_dir, ignore_errors=True)
    print(f"  total {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    print()
    print_table(*main_table(results, modes), args.markdown)
    print()
    print("Per-round ratios and once-per-run costs (exit: leaving the audit, per block; closing the watch, once):")
    print_table(*detail_table(results, modes), args.markdown)
    if any(m.mark for r in results for m in r.modes.values()):
        print("\n~ estimated from warm-up steps (not interleaved; the first steps include one-time setup)")
    all_notes = notes + [n for r in results for n in r.notes] + leaky_notes(results)
    if all_notes:
        print("\nnotes:")
        for note in all_notes:
            print(f"  - {note}")
    print()
    for mode, target in TARGETS.items():
        measured = [r for r in results if mode in r.modes]
        if not measured:
            continue
        over = [f"{r.model} ({r.modes[mode].ratio:.3f}x)" for r in measured if r.modes[mode].ratio > target]
        verdict = f"ABOVE target on {', '.join(over)}" if over else "within target on all"
        print(f"{LABELS[mode]}: target <= {target:g}x: {verdict} ({len(measured)} model(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
