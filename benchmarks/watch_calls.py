"""Python calls and leaky's own time per unsampled `leaky.watch()` step, against depth.

A deterministic companion to depth_sweep.py's timings (which this machine's noise blurs at
the 1% level): cProfile counts the function calls of 50 unsampled steps of a width-64
Linear+ReLU MLP (batch 64, Adam), after the dense steps, the coupling probe and step 100:
all of them, leaky's own, and those leaky makes into torch and builtins (each tensor op
leaky runs is one; in place on this CPU one costs 5-25 µs).

    python benchmarks/watch_calls.py 10 50 200
    python benchmarks/watch_calls.py --audit 10 50 200    # per audited step (leaky.audit held open)

With --audit: the calls of 20 steps inside one `leaky.audit(steps=None)`, after 5 steps in
it, against the same steps without leaky (each figure counts torch's C functions too: every
op leaky calls is a call).
"""
import argparse
import cProfile
import io
import os
import pstats
import tempfile

import torch, torch.nn as nn, torch.nn.functional as F
import leaky


def deep_mlp(depth: int):
    """(model, Adam, inputs, targets): the width-64 Linear+ReLU MLP of this depth, batch 64 (a
    fresh, seeded copy)."""
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, opt, torch.randn(64, 64), torch.randint(0, 10, (64,))


def training_loop(depth: int):
    """loop(n): n training steps of deep_mlp(depth)."""
    model, opt, x, y = deep_mlp(depth)

    def loop(n):
        for _ in range(n):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return loop


def profiled(loop, n: int) -> pstats.Stats:
    profile = cProfile.Profile()
    profile.enable()
    loop(n)
    profile.disable()
    return pstats.Stats(profile, stream=io.StringIO())


def leaky_calls(stats: pstats.Stats) -> list:
    return [v for k, v in stats.stats.items() if f"{os.sep}leaky{os.sep}" in k[0]]


def measure(depth: int, steps: int = 50) -> str:
    loop = training_loop(depth)
    with leaky.watch(store=os.path.join(tempfile.mkdtemp(), "runs.db")):
        loop(102)
        stats = profiled(loop, steps)
    ours = leaky_calls(stats)
    return (f"depth {depth}: {stats.total_calls / steps:.0f} Python calls per unsampled step, "
            f"{sum(v[1] for v in ours) / steps:.0f} in leaky ({1e6 * sum(v[2] for v in ours) / steps:.0f} µs of "
            f"leaky's own time, under cProfile), {calls_from_leaky(stats) / steps:.0f} calls from leaky into torch "
            "and Python's builtins")


def calls_from_leaky(stats: pstats.Stats) -> int:
    """Calls of functions outside leaky (torch's ops, builtins) made by leaky's own functions."""
    inside = f"{os.sep}leaky{os.sep}"
    return sum(counts[0] for key, entry in stats.stats.items() if inside not in key[0]
               for caller, counts in entry[4].items() if inside in caller[0])


def measure_audit(depth: int, steps: int = 20) -> str:
    loop = training_loop(depth)
    loop(3)
    plain = profiled(loop, steps)
    with leaky.audit(steps=None):
        loop(5)
        audited = profiled(loop, steps)
    nodes = 5 * depth + 6   # Addmm, ReLU, T, 2 AccumulateGrad per layer; the head's 4, the loss's 2
    extra = (audited.total_calls - plain.total_calls) / steps
    return (f"depth {depth}: {audited.total_calls / steps:.0f} calls per audited step, {plain.total_calls / steps:.0f} "
            f"without leaky: {extra:.0f} more, {extra / nodes:.1f} per autograd node ({nodes}); "
            f"{sum(v[1] for v in leaky_calls(audited)) / steps:.0f} calls of leaky's own functions")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("depths", nargs="*", type=int, default=[10, 50, 200], metavar="DEPTH",
                        help="MLP depths to count (default: 10 50 200)")
    parser.add_argument("--audit", action="store_true",
                        help="count an audited step (leaky.audit held open) instead of an unsampled watch step")
    args = parser.parse_args(argv)
    if any(depth < 1 for depth in args.depths):
        parser.error("each DEPTH must be at least 1")
    return args


if __name__ == "__main__":
    options = parse_args()
    torch.set_num_threads(1)
    for depth in options.depths:
        print((measure_audit if options.audit else measure)(depth), flush=True)
