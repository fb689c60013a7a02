"""`leaky fix` on every built-in example: which fixes it tries, and what each measured.

    python benchmarks/fix_zoo.py                 # all examples, K=200, H=20, 2 noise runs (~1 min)
    python benchmarks/fix_zoo.py --markdown --only relu-high-lr,dqn-clamped-td
    python benchmarks/fix_zoo.py --steps 100 --healthy
    python benchmarks/fix_zoo.py --scripts --steps 100 --holdout 10 --markdown   # benchmarks/zoo/*/train.py (~25 min)

With --scripts it runs `leaky fix` as a command on each standalone script of the benchmark
zoo (40 broken, 16 healthy, written for `leaky audit`, not for `leaky fix`), one process
each, and reads the leaky/fix-v1 JSON.

For each broken example (and, with --healthy, each healthy one): the fixes tried, the
held-out loss unfixed → fixed, the noise margin, and the verdict. A healthy example must
get no fix at all; a line says how many did.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from leaky.fix import FixConfig, try_fixes
from leaky.zoo import EXAMPLES


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--holdout", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--only", help="comma-separated example names")
    parser.add_argument("--healthy", action="store_true", help="also run the healthy examples")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--scripts", action="store_true", help="the benchmark zoo's scripts instead")
    args = parser.parse_args()
    if args.scripts:
        return scripts(args)
    torch.set_num_threads(1)
    config = FixConfig(steps=args.steps, holdout=args.holdout, repeats=args.repeats)
    names = args.only.split(",") if args.only else [n for n, e in EXAMPLES.items() if args.healthy or not e.healthy]
    rows, proposed_on_healthy, start = [], [], time.perf_counter()
    for name in names:
        example = EXAMPLES[name]
        result = try_fixes(lambda: example.run(steps=config.steps + config.holdout + 1, seed=0), config, name)
        if example.healthy and result.outcomes:
            proposed_on_healthy.append(name)
        if not result.outcomes:
            rows.append((name, "healthy" if example.healthy else "broken", "(none)", "", "", ""))
        for outcome in result.outcomes:
            margin = "n/a" if outcome.margin is None else f"{outcome.margin:.3g}"
            loss = f"{_fmt(outcome.unfixed_score)} → {_fmt(outcome.trial.score)}"
            rows.append((name, ",".join(sorted({f.code for f in outcome.candidate.findings})),
                         outcome.candidate.title, loss, margin, outcome.verdict))
        print(f"{name}: {len(result.outcomes)} fix(es), {result.seconds:.1f} s", file=sys.stderr)
    header = ("example", "findings", "fix tried", "held-out loss unfixed → fixed", "margin", "verdict")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    else:
        for row in rows:
            print("  ".join(row))
    helps = sum(row[-1] == "helps" for row in rows)
    print(f"\n{len(names)} examples, {sum(1 for r in rows if r[2] != '(none)')} fixes tried, {helps} help; "
          f"healthy examples given a fix: {len(proposed_on_healthy)} {proposed_on_healthy or ''}; "
          f"{time.perf_counter() - start:.0f} s (K={config.steps}, H={config.holdout}, repeats={config.repeats})")
    return 0


def scripts(args) -> int:
    """`leaky fix` on benchmarks/zoo/*/train.py, each in its own process."""
    import json
    import os
    import subprocess
    import tempfile

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo")
    cases = sorted(d for d in os.listdir(root) if os.path.exists(os.path.join(root, d, "train.py")))
    if args.only:
        cases = [c for c in cases if c in args.only.split(",")]
    count = {"broken": 0, "with_fix": 0, "helped": 0, "healthy": 0, "healthy_with_fix": 0}
    verdicts: dict[str, int] = {}
    rows = []
    for case in cases:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "fix.json")
            subprocess.run([sys.executable, "-m", "leaky", "fix", "--steps", str(args.steps), "--holdout",
                            str(args.holdout), "--repeats", str(args.repeats), "--json", out, "train.py"],
                           cwd=os.path.join(root, case), capture_output=True, text=True, timeout=900,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
            data = json.load(open(out)) if os.path.exists(out) else None
        fixes = data["fixes"] if data else []
        healthy = case.startswith("h")
        count["healthy" if healthy else "broken"] += 1
        if healthy:
            count["healthy_with_fix"] += bool(fixes)
        else:
            count["with_fix"] += bool(fixes)
            count["helped"] += any(f["verdict"] == "helps" for f in fixes)
        for fix in fixes:
            verdicts[fix["verdict"]] = verdicts.get(fix["verdict"], 0) + 1
        note = "" if data else " (no optimizer step: nothing to compare)"
        rows.append((case, "; ".join(f"{f['fix']}: {f['verdict']}" for f in fixes) or "(none)" + note))
        print(f"{case}: {len(fixes)} fix(es)", file=sys.stderr)
    for case, text in rows:
        print(f"| {case} | {text} |" if args.markdown else f"{case}  {text}")
    print(f"\n{count['broken']} broken scripts: {count['with_fix']} got a fix to try, {count['helped']} at least one "
          f"that helps; verdicts {verdicts}; healthy scripts given a fix: {count['healthy_with_fix']} of "
          f"{count['healthy']} (K={args.steps}, H={args.holdout}, repeats={args.repeats})")
    return 0


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4g}"


if __name__ == "__main__":
    sys.exit(main())
