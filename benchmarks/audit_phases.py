"""Where an audited step's extra time goes: forward, zero_grad, backward, optimizer step.

    python benchmarks/audit_phases.py 10 50 200       # watch_calls.py's width-64 MLPs
    python benchmarks/audit_phases.py --steps 80 50

Each phase of each step is timed on its own (time.perf_counter) in one process, for plain
steps, then inside one `leaky.audit(steps=None)` held open (after 5 steps in it: no step
timed is an audit's first), then plain again. A phase's figure is its minimum over the
steps (the least disturbed by this machine's noise); plain takes the lower of its two runs.
The optimizer step's phase holds leaky's step end: the update probe, the one device-to-host
copy and the fold of the step's statistics. The extra per autograd node divides by
watch_calls.py's node count (5 per layer, 6 more for the head and the loss).

Run it with one thread on an idle core (taskset -c 1 ...): two benchmarks at once on a
2-core machine slow each other.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import leaky  # noqa: E402

from watch_calls import deep_mlp  # noqa: E402

PHASES = ("forward", "zero_grad", "backward", "optimizer step")


def timed_steps(model, opt, x, y, steps: int) -> list[float]:
    """Per phase, its fastest time over `steps` steps, in seconds."""
    best = [float("inf")] * len(PHASES)
    clock = time.perf_counter
    for _ in range(steps):
        t0 = clock()
        loss = F.cross_entropy(model(x), y)
        t1 = clock()
        opt.zero_grad()
        t2 = clock()
        loss.backward()
        t3 = clock()
        opt.step()
        t4 = clock()
        best = [min(b, t) for b, t in zip(best, (t1 - t0, t2 - t1, t3 - t2, t4 - t3))]
    return best


def measure(depth: int, steps: int) -> list[str]:
    model, opt, x, y = deep_mlp(depth)
    timed_steps(model, opt, x, y, 3)
    before = timed_steps(model, opt, x, y, steps)
    with leaky.audit(steps=None):
        timed_steps(model, opt, x, y, 5)
        audited = timed_steps(model, opt, x, y, steps)
    after = timed_steps(model, opt, x, y, steps)
    plain = [min(a, b) for a, b in zip(before, after)]
    nodes = 5 * depth + 6
    extra = [a - p for a, p in zip(audited, plain)]
    total = sum(extra)
    rows = []
    for name, p, a, e in zip(PHASES, plain, audited, extra):
        rows.append(f"| {depth} | {name} | {1e3 * p:.2f} | {1e3 * a:.2f} | {1e3 * e:+.2f} | {1e6 * e / nodes:.0f} | "
                    f"{100 * e / total:.0f}% |")
    rows.append(f"| {depth} | whole step | {1e3 * sum(plain):.2f} | {1e3 * sum(audited):.2f} | {1e3 * total:+.2f} | "
                f"{1e6 * total / nodes:.0f} | 100% |")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("depths", nargs="*", type=int, default=[10, 50, 200])
    p.add_argument("--steps", type=int, default=40, help="timed steps per run (default 40)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, leaky {leaky.__version__}, 1 thread, min over {args.steps} steps per phase")
    print("| depth | phase | plain ms | audited ms | extra ms | extra µs per node | share of the extra |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for depth in args.depths:
        for row in measure(depth, args.steps):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
