"""LK308's threshold, measured: what healthy models leave of one repeated batch's loss.

    OMP_NUM_THREADS=1 python benchmarks/probe_calibration.py            # all cases (~5 min)
    OMP_NUM_THREADS=1 python benchmarks/probe_calibration.py --probes   # also both full probes at K=200

For each script of `benchmarks/probe_cases.py` (healthy models of several kinds, and
broken ones) it runs `leaky probe`'s cannot-overfit run once for the longest K and reads,
from that one loss curve, what is left of the reducible loss, (L_K - floor) / (L_0 - floor)
with L_K the mean of the 5 losses before step K, at each K (the run is the same whatever
K, so the prefix of the longest curve is the shorter run). With --probes it also runs the
whole `leaky probe` at the default K = 200 on each and prints both verdicts.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import probe_cases  # noqa: E402

from leaky.probe import ProbeConfig, run_probes  # noqa: E402
from leaky.probe.session import probe_overfit  # noqa: E402
from leaky.script import script_program  # noqa: E402

KS = (50, 100, 200, 400)


def remaining_at(losses: list[float], floor: float, k: int, tail: int = 5) -> float | None:
    if len(losses) < k:
        return None
    last = sum(losses[k - tail:k]) / tail
    return (last - floor) / (losses[0] - floor)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", action="store_true", help="also run both probes at K=200 on each case")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--zoo", action="store_true", help="also the healthy built-in examples (leaky.zoo)")
    args = parser.parse_args()
    cases = {name: (src, "healthy") for name, src in probe_cases.HEALTHY.items()}
    cases.update({name: (src, "broken") for name, (src, _) in probe_cases.BROKEN.items()})
    if args.only:
        cases = {n: c for n, c in cases.items() if n in args.only.split(",")}
    print("| case | kind | " + " | ".join(f"left at K={k}" for k in KS) + " | floor |"
          + (" LK308 | LK309 (real vs zeroed, noise) |" if args.probes else ""))
    print("|---|---|" + "---|" * len(KS) + "---|" + ("---|---|" if args.probes else ""))
    if args.zoo:
        from leaky.zoo import EXAMPLES

        cases.update({f"zoo {name}": (example, "healthy") for name, example in EXAMPLES.items() if example.healthy})
    with tempfile.TemporaryDirectory() as folder:
        for name, (source, kind) in cases.items():
            if isinstance(source, str):
                path = os.path.join(folder, f"{name}.py")
                with open(path, "w") as handle:
                    handle.write(source)
                program = script_program(path, [])
            else:
                program = (lambda example: lambda: example.run(steps=max(KS) + 21, seed=0))(source)
            start = time.perf_counter()
            outcome = probe_overfit(program, ProbeConfig(steps=max(KS), overfit_audit_steps=1))
            if "losses" not in outcome.measured or len(outcome.measured["losses"]) < min(KS):
                print(f"| {name} | {kind} | could not run: {outcome.reason} |")
                continue
            m = outcome.measured
            floor = m.get("loss_floor", 0.0)
            cells = [remaining_at(m["losses"], floor, k) for k in KS]
            row = f"| {name} | {kind} | " + " | ".join("" if c is None else f"{c:.3g}" for c in cells)
            row += f" | {floor:.3g} |"
            if args.probes:
                result = run_probes(program, ProbeConfig())
                lk308, lk309 = result.probes
                real, zero = lk309.measured.get("real_loss"), lk309.measured.get("zeroed_loss")
                noise = lk309.measured.get("margin")
                row += (f" {lk308.verdict} | {lk309.verdict}" +
                        (f" ({real:.3g} vs {zero:.3g}, {noise:.2g})" if None not in (real, zero, noise) else "") + " |")
            print(row + f"  <!-- {time.perf_counter() - start:.1f} s -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
