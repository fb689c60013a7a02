"""Run: python benchmarks/overhead.py [--quick]   (from the repository root)

    python benchmarks/overhead.py --quick                     # smoke run, ~1 min on 2 cores
    python benchmarks/overhead.py --markdown                  # full run, 4-6 min on 2 shared cores
    python benchmarks/overhead.py --models cnn,lstm --rounds 9
    python benchmarks/overhead.py --models nanogpt,mingpt,dcgan,hf-gpt2   # stand-ins for public programs

Every way of looking at a training step, in one table: ms/step and the ratio to a plain
step for each model of audit_overhead.py (MLP, CNN, LSTM, Transformer, built from the same
seed), under

  audit          leaky.audit(steps=None), entered and left once per timed block (as in
                 audit_overhead.py); leaving it (folding the statistics) is timed apart.
                 A block of --steps steps holds one audit's first step, which also
                 runs the once-per-model probes (LK306's batch probe: a forward and two
                 backward passes), so this mode weighs first steps far above their share
                 in a real audit
  audit-run      an audit as `leaky audit` runs one by default (AuditConfig.steps, 20
                 steps): a block is the whole audit, first step included; its exit
                 (folding, every check and the report) is timed apart
  audit-held     leaky.audit(steps=None), open from set-up to close: every timed step is a
                 steady-state audited step (none is an audit's first)
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
steps too. So each mode runs in its own worker process (benchmarks/_harness.py; the modes
are benchmarks/_modes.py), forked afresh for each model (so that one model's allocation
history does not slow the next), with --threads torch threads, all pinned to one CPU when
--threads is 1 (so that none settles on a busier core; by default the CPU that was idlest
over a second at the start). A worker builds the model's workload from the same seed and
keeps it (and the watch) for all that model's blocks. The main process interleaves the
workers in rounds (plain, audit, watch-default, ..., plain, ...); one worker computes at a
time, the others wait on a pipe.

Memory allocation: glibc's malloc moves its mmap threshold with each process's own history
of allocations, so two processes running the same step can differ by 10-15% for good (large
tensors come from fresh mmap'd pages in one and from the heap in the other). Unless
--default-malloc is given, each worker first calls mallopt(M_MMAP_THRESHOLD, 32 MiB) and
mallopt(M_TRIM_THRESHOLD, 128 MiB), as MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_
would, which fixes the threshold: the same for every mode.

Block sizes: --steps per block for every mode but watch-default, whose block is DEFAULT_EVERY
steps: one whole sampling period, so every block holds exactly one sampled (fully audited)
step, in the proportion it has in a long run (the script checks the count). A mode much
slower than plain (Cockpit) times shorter blocks (at least one step); one whose warm-up
step takes over --max-step-s is not timed in rounds, its ratio estimated from the warm-up
('~').

Every block starts with one untimed step of the mode (for audit and anomaly, a plain step
before the context is entered, so that the context's first step is timed): the other
workers have just run on the same CPU, and the first step after that is slower; a block of
3-5 steps would pay that in full, a 100-step block hardly (on the --quick LSTM, 2.4 ms a
step, that alone made watch-default look 20% faster than plain). The 100 timed steps of a
watch-default block still hold exactly one sampled step.

Each step is timed on its own (time.perf_counter); entering and leaving the audit or
detect_anomaly context is not inside a step (leaving it is the 'exit ms' column). Each
round's reference is the mean plain step of that round's plain block and the next round's
(they bracket the other blocks in time). A mode's ratio is the median over rounds of (its
mean step in the block / the reference); its ms/step is the median block mean. A second
table gives the spread (interquartile range) of the per-round ratios, this run's noise.

Cockpit runs only if `import cockpit` works. Cockpit 1.0.2 imports pkg_resources (removed
from recent setuptools) only to read its own version; if that is the only thing missing, a
stub stands in for it. Cockpit's economy quantities need per-sample gradients (batch x
parameters floats): over --cockpit-max-gb the model is skipped for it; and BackPACK supports
only some layers (not MultiheadAttention, LayerNorm, a bare nn.Parameter).
If a mode fails on a model, its traceback is printed and the mode is skipped for it.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import leaky  # noqa: E402
from leaky.config import AuditConfig  # noqa: E402
from leaky.watch import DEFAULT_EVERY  # noqa: E402

from _harness import (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, ModelTiming, Plan, Result, WorkerOptions,  # noqa: E402
                      bracketing_reference, iqr, mean, parse, parser, time_model, worker_pool)
from _modes import close_problems, cockpit_status, make_runner  # noqa: E402
from _tables import print_notes, print_table, print_verdicts  # noqa: E402
from audit_overhead import BUILDERS  # noqa: E402
from standins import STANDINS, missing  # noqa: E402

MODES = ("plain", "audit", "audit-run", "audit-held", "watch-default", "watch-every-1", "anomaly", "naive-item",
         "cockpit", "plain-b")
AUDIT_RUN = AuditConfig().steps     # the steps of a default audit (audit-run's block)
LABELS = {"plain-b": "plain again (A/A)", "audit": "audit", "audit-run": f"audit run ({AUDIT_RUN} steps)",
          "audit-held": "audit held open", "watch-default": f"watch every={DEFAULT_EVERY}",
          "watch-every-1": "watch every=1",
          "anomaly": "detect_anomaly", "naive-item": "naive .item() hooks", "cockpit": "Cockpit economy"}
TARGETS = {"audit": 2.0, "watch-default": 1.02, "watch-every-1": 1.15}
ROUNDS = (5, 3)                      # default rounds: full, --quick
MALLOC = {M_MMAP_THRESHOLD: 32 * 2**20, M_TRIM_THRESHOLD: 128 * 2**20}   # unless --default-malloc


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


def bench_model(name: str, workers, args) -> Result:
    plan = Plan(rounds=args.rounds, steps=args.steps, warmup=args.warmup, max_step_s=args.max_step_s,
                untimed_first=True, lengths={"watch-default": DEFAULT_EVERY, "audit-run": AUDIT_RUN})
    timing = time_model(name, workers, plan)
    results = {mode: _estimate(name, mode, timing, args) for mode in timing.slow}
    reference = bracketing_reference([mean(b.times) for b in timing.blocks["plain"]])
    for mode in timing.live:
        results[mode] = _summarize(mode, timing, reference)
    return Result(name, results["plain"].ms, results, timing.notes)


def _estimate(name: str, mode: str, timing: ModelTiming, args) -> ModeResult:
    """A mode too slow to time in rounds, from its warm-up steps."""
    times = timing.warm[mode][0]
    est = statistics.median(times)
    timing.notes.append(f"{name}/{mode}: a warm-up step took {max(times):.1f} s (over --max-step-s "
                        f"{args.max_step_s:g}): not timed in rounds; ~{1e3 * est:.0f} ms/step from "
                        f"{len(times)} warm-up step(s)")
    return ModeResult(ms=1e3 * est, ratio=est / statistics.median(timing.warm["plain"][0]), mark="~",
                      info=timing.infos.get(mode, {}))


def _summarize(mode: str, timing: ModelTiming, reference: list[float]) -> ModeResult:
    """Median block mean, median and spread of the per-round ratios to the reference."""
    blocks, info = timing.blocks[mode], timing.infos[mode]
    per_step = [mean(b.times) for b in blocks]
    ratios = [s / r for s, r in zip(per_step, reference)]
    plain = mode == "plain"
    return ModeResult(
        ms=1e3 * statistics.median(per_step),
        ratio=1.0 if plain else statistics.median(ratios),
        spread=(float("nan"), float("nan")) if plain else iqr(ratios),
        block=timing.block[mode], timed=timing.block[mode] * len(blocks), sampled=[sum(b.heavy) for b in blocks],
        exit_ms=1e3 * statistics.median(b.exit_s for b in blocks) if mode in ("audit", "audit-run", "anomaly") else
        1e3 * info.get("exit_s", float("nan")),
        info=info)


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
            out.append(text + close_problems(i))
    return out


def parse_args(argv: list[str] | None = None):
    p = parser(__doc__, MODES, list(BUILDERS), ROUNDS, f"watch-default: {DEFAULT_EVERY}")
    p.set_defaults(models=",".join(BUILDERS))   # the stand-ins (standins.py) when named
    p.epilog = f"stand-ins for public programs (standins.py), by name: {','.join(STANDINS)}"
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc thresholds alone in the workers (see above)")
    p.add_argument("--no-store", action="store_true", help="watch without a SQLite store (default: a temp file)")
    return parse(p, argv, MODES, list(BUILDERS) + list(STANDINS), ROUNDS)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = list(args.modes)
    notes = []
    if "cockpit" in modes:
        ok, why = cockpit_status()
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
    options = WorkerOptions(quick=args.quick, seed=args.seed, threads=args.threads, cpu=args.cpu,
                            malloc={} if args.default_malloc else MALLOC, store_dir=store_dir,
                            cockpit_max_gb=args.cockpit_max_gb)
    t0 = time.perf_counter()
    results = []
    try:
        for name in args.models:     # fresh workers per model: no model's allocations shape another's
            if (why := missing(name)) is not None:
                print(f"{name}: skipped: {why}", flush=True)
                notes.append(f"{name}: skipped: {why}")
                continue
            with worker_pool(modes, options, make_runner) as workers:
                results.append(bench_model(name, workers, args))
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
    print_notes(notes + [n for r in results for n in r.notes] + leaky_notes(results))
    print()
    print_verdicts(results, TARGETS, label=LABELS.get)
    return 0


if __name__ == "__main__":
    sys.exit(main())
