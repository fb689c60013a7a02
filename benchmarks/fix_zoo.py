"""`leaky fix` on every built-in example: which fixes it tries, and what each measured.

    python benchmarks/fix_zoo.py                 # all examples, K=200, H=20, 2 noise runs (~1 min)
    python benchmarks/fix_zoo.py --markdown --only relu-high-lr,dqn-clamped-td
    python benchmarks/fix_zoo.py --steps 100 --healthy

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
    args = parser.parse_args()
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


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4g}"


if __name__ == "__main__":
    sys.exit(main())
