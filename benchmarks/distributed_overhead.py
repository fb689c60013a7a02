"""What leaky costs a step under DDP with 2 ranks (torchrun, gloo, CPU), as ratios against
plain DDP steps of the same model in the same run.

    python benchmarks/distributed_overhead.py --rounds 3
    PYTHONPATH=<another tree> python benchmarks/distributed_overhead.py   # that tree's leaky

Each round launches one torchrun job per mode, modes interleaved: plain, watch every 10
(sampled steps: each makes leaky's exchange across ranks), and the held audit. A job trains
the model for --steps steps (after --warmup) and rank 0 writes every step's wall time; a
step's time is the slower rank's (DDP's all-reduce keeps them in step). The table gives,
per mode, the median step time and its ratio to plain's median in the same round, with the
watch's sampled and unsampled steps apart; the ratios are medians over rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ("plain", "watch-every-10", "audit-held")
EVERY = 10


def _worker(mode: str, steps: int, warmup: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(1 + rank)
    x, y = torch.randn(64, 128, generator=gen), torch.randint(0, 10, (64,), generator=gen)
    context = None
    if mode != "plain":
        import leaky

        context = leaky.watch(every=EVERY) if mode.startswith("watch") else leaky.audit(steps=None)
        context.__enter__()
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    if context is not None:
        context.__exit__(None, None, None)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, times)
    if rank == 0:
        slowest = [max(per_rank[i] for per_rank in gathered) for i in range(len(times))]
        with open(out, "w") as handle:
            json.dump(slowest[warmup:], handle)
    dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


FAILED: list[str] = []   # the launches that failed (and were tried once more)


def _launch(mode: str, args, again: bool = True) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times.json")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                               f"--master_port={_port()}", os.path.abspath(__file__), "--worker", mode,
                               "--steps", str(args.steps), "--warmup", str(args.warmup), "--out", out],
                              capture_output=True, text=True, env=env, timeout=900, cwd=tmp)
        if done.returncode or not os.path.exists(out):
            lines = [line for line in done.stderr.splitlines() if "rror" in line or "what()" in line]
            FAILED.append(f"{mode}: exit {done.returncode}: {lines[-1] if lines else done.stderr[-300:]}")
            if again:
                return _launch(mode, args, again=False)
            raise SystemExit(f"{mode}: the job failed twice\n{done.stderr[-3000:]}")
        with open(out) as handle:
            return json.load(handle)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.steps, args.warmup, args.out)
        return 0
    ratios: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        times = {mode: _launch(mode, args) for mode in MODES}
        plain = statistics.median(times["plain"])
        for mode, values in times.items():
            if mode.startswith("watch"):
                # a watch samples the first steps of its run, then one in EVERY: warmup shifts the index
                sampled = [t for i, t in enumerate(values) if (i + args.warmup) % EVERY == 0]
                unsampled = [t for i, t in enumerate(values) if (i + args.warmup) % EVERY != 0]
                ratios.setdefault(f"{mode} (sampled steps)", []).append(statistics.median(sampled) / plain)
                ratios.setdefault(f"{mode} (unsampled steps)", []).append(statistics.median(unsampled) / plain)
                ratios.setdefault(f"{mode} (whole run)", []).append(statistics.mean(values) / statistics.mean(times["plain"]))
            else:
                ratios.setdefault(mode, []).append(statistics.median(values) / plain)
        print(f"round {round_ + 1}: plain {1000 * plain:.2f} ms/step", file=sys.stderr)
    print("| mode (2 ranks, DDP, gloo) | ratio to plain, median over rounds | per round |")
    print("|---|---:|---|")
    for mode, values in ratios.items():
        print(f"| {mode} | {statistics.median(values):.3f} | {', '.join(f'{v:.3f}' for v in values)} |")
    for line in FAILED:
        print(f"failed once, run again: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
