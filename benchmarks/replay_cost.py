"""What the forward replay's every-step part costs a watch's unsampled step (record/replay.py).

A depth-10, width-64 tanh MLP (batch 32, SGD), 2000 steps inside `leaky.watch(every=10**9)`
(so only step 0 is sampled), timed from step 10 on. Two variants, interleaved in blocks in
one process: `replay` as shipped (the per-root pre-hook that keeps the call and the RNG
state, the loss's finiteness test at backward), and `without`, where the replay never arms
(no hook, nothing kept, nothing tested: the code before the replay, to one attribute read).
Prints µs/step per block and the median difference. `--parts` times the two added pieces
alone instead, by the fastest batches (robust on a shared machine): the model's call with
the replay's pre-hook armed against the same call with no hook, alternating, and the loss
test that backward() runs (`Recorder._replay_if_nonfinite` on a finite 0-d CPU loss).

    taskset -c 1 python benchmarks/replay_cost.py --rounds 5 --steps 2000
    taskset -c 1 python benchmarks/replay_cost.py --parts
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.record.replay import ForwardReplay

_ARM = ForwardReplay.arm


def mlp(depth: int = 10, width: int = 64) -> nn.Module:
    layers = [nn.Linear(32, width), nn.Tanh()]
    for _ in range(depth - 2):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def block(steps: int, replay: bool, plain: bool = False) -> list[float]:
    """µs of each step from step 10 on, in one watched run (or a plain one)."""
    ForwardReplay.arm = _ARM if replay else (lambda self, on, modules: None)
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 32), torch.randint(0, 10, (32,))
    watch = leaky.watch(every=10 ** 9) if not plain else None
    if watch is not None:
        watch.__enter__()
    try:
        times = []
        for step in range(steps):
            start = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - start)
        return [t * 1e6 for t in times[10:]]
    finally:
        if watch is not None:
            watch.__exit__(None, None, None)
        ForwardReplay.arm = _ARM


def fastest(fn, batches: int = 40, per_batch: int = 200) -> float:
    """µs per call of the fastest batch."""
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(per_batch):
            fn()
        best = min(best, (time.perf_counter() - start) / per_batch)
    return best * 1e6


def parts(rounds: int = 400) -> None:
    """The two added pieces, in a watch's unsampled steps, in place: the model's call with
    its armed pre-hook and without (alternating batches of 20 calls; min and 10th percentile
    of the batches), and the loss test at backward (the fastest of 40 batches)."""
    torch.manual_seed(0)
    model = mlp()
    x, y = torch.randn(32, 32), torch.randint(0, 10, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def calls(n: int = 20) -> float:
        start = time.perf_counter()
        for _ in range(n):
            model(x)
        return (time.perf_counter() - start) / n * 1e6

    with leaky.watch(every=10 ** 9) as watch:
        for _ in range(3):   # step 0 sampled, then unsampled steps: the root hooked and armed
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        recorder = watch.recorder
        replay = recorder.replay
        assert replay.armed and len(replay._hooked) == 1
        timed: dict[str, list[float]] = {"hook": [], "none": []}
        for i in range(rounds):
            for variant in (("hook", "none") if i % 2 else ("none", "hook")):
                for handle in replay._hooked.values():
                    handle.remove()
                replay._hooked.clear()
                if variant == "hook":
                    replay._hook(model)
                timed[variant].append(calls())
        loss = F.cross_entropy(model(x), y)

        def test_loss():
            replay.calls.append(None)
            recorder._replay_if_nonfinite(loss)
        tested = fastest(test_loss)
        appended = fastest(lambda: replay.calls.append(None) or replay.calls.clear())
        replay.calls.clear()
    low = {k: sorted(v) for k, v in timed.items()}
    hook_min, hook_p10 = (low["hook"][0] - low["none"][0],
                          low["hook"][len(low["hook"]) // 10] - low["none"][len(low["none"]) // 10])
    print(f"model(x) with the armed pre-hook: min {low['hook'][0]:.1f} µs, without {low['none'][0]:.1f} µs "
          f"(+{hook_min:.2f}); 10th percentile +{hook_p10:.2f} µs")
    print(f"the loss test at backward: {tested - appended:.2f} µs")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--parts", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.parts:
        return parts()
    block(200, True), block(200, False), block(200, True, plain=True)   # warm-up
    # NOTE: on a shared machine the mean and even the median step of a block swing by ±50%
    # (other processes): each block is summarised by its 10th-percentile step (and median).
    rows = []
    for r in range(args.rounds):
        order = [True, False] if r % 2 == 0 else [False, True]
        times = {variant: block(args.steps, variant) for variant in order}
        times["plain"] = block(args.steps, True, plain=True)
        row = {k: (sorted(v)[len(v) // 10], statistics.median(v)) for k, v in times.items()}
        rows.append(row)
        print(f"round {r}: 10th percentile (median) µs/step: plain {row['plain'][0]:7.1f} ({row['plain'][1]:7.1f})  "
              f"without {row[False][0]:7.1f} ({row[False][1]:7.1f})  replay {row[True][0]:7.1f} ({row[True][1]:7.1f})"
              f"  diff of 10th percentiles {row[True][0] - row[False][0]:+6.1f}", flush=True)
    diffs = [row[True][0] - row[False][0] for row in rows]
    print(f"over rounds, median of the blocks' 10th percentiles: "
          f"plain {statistics.median(r['plain'][0] for r in rows):.1f}, "
          f"without {statistics.median(r[False][0] for r in rows):.1f}, "
          f"replay {statistics.median(r[True][0] for r in rows):.1f} µs/step; replay - without: "
          f"median {statistics.median(diffs):+.1f} µs/step (range {min(diffs):+.1f} .. {max(diffs):+.1f})")


if __name__ == "__main__":
    main()
