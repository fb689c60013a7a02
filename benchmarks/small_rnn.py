"""A held audit of makemore's small RNN and GRU against plain steps, in one process.

    python benchmarks/small_rnn.py --makemore ~/src/makemore gru rnn
    python benchmarks/small_rnn.py --makemore ~/src/makemore --steps 60 --pairs 2 gru

Issue 18 asks for an audit at <= 2x on small RNNs, where a step is a few ms and leaky's
cost per autograd node is the whole of its overhead. This imports makemore.py from a
checkout of karpathy/makemore (not part of leaky: pass its folder), writes a names file of
random lowercase words (no download), builds its RNN or GRU at its defaults (n_embd 64,
n_embd2 64, batch 32, AdamW) and times steps (forward, zero_grad, backward, AdamW step):
plain, inside one `leaky.audit(steps=None)` held open (after 5 steps in it), then plain
again. The ratio is the audited step's median over the plain step's, the lower of the two
plain medians; the mean ratio, their means (with AuditConfig.steady_every the median
audited step is a light one); with --pairs N, N such measurements in a row.

Run it with one thread on an idle core (taskset -c 1 ...).
"""
import argparse
import os
import random
import statistics
import sys
import tempfile
import time

import torch

import leaky
from leaky.config import AuditConfig


def names_file(folder: str, count: int = 32000, seed: int = 0) -> str:
    rng = random.Random(seed)
    path = os.path.join(folder, "names.txt")
    with open(path, "w") as f:
        for _ in range(count):
            f.write("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10))) + "\n")
    return path


def measure(mm, path: str, kind: str, steps: int, run_steps: int = 0) -> tuple[float, float, float, float]:
    torch.manual_seed(0)
    train, _ = mm.create_datasets(path)
    config = mm.ModelConfig(vocab_size=train.get_vocab_size(), block_size=train.get_output_length(),
                            n_layer=4, n_head=4, n_embd=64, n_embd2=64)
    model = mm.RNN(config, cell_type=kind)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8)
    loader = mm.InfiniteDataLoader(train, batch_size=32, pin_memory=False, num_workers=0)
    batches = [loader.next() for _ in range(8)]

    def timed(n: int) -> list[float]:
        times = []
        for i in range(n):
            x, y = batches[i % len(batches)]
            start = time.perf_counter()
            _, loss = model(x, y)
            model.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - start)
        return times

    timed(5)
    before = timed(steps)
    with leaky.audit(steps=None):
        timed(5)
        audited = timed(steps)
    after = timed(steps)
    if run_steps:   # a whole default audit: entered, run_steps steps, left (its report built)
        plain = sum(timed(run_steps))
        start = time.perf_counter()
        with leaky.audit(steps=run_steps) as run:
            timed(run_steps)
        run.report
        whole = time.perf_counter() - start
        plain = min(plain, sum(timed(run_steps)))
        return plain, whole, plain, whole
    # NOTE: the mean too: with AuditConfig.steady_every most audited steps are light, and
    # the median step is a light one; the mean charges the measured steps their share
    plain = min(before, after, key=statistics.median)
    return statistics.median(plain), statistics.median(audited), statistics.mean(plain), statistics.mean(audited)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kinds", nargs="*", default=["rnn", "gru"], choices=["rnn", "gru"])
    p.add_argument("--makemore", required=True, help="folder of a karpathy/makemore checkout (holds makemore.py)")
    p.add_argument("--steps", type=int, default=40, help="timed steps per block (default 40)")
    p.add_argument("--pairs", type=int, default=1, help="measurements per model (default 1)")
    p.add_argument("--audit-run", action="store_true",
                   help="also time a whole default audit (AuditConfig.steps steps, its exit and report) "
                        "against as many plain steps, after the held measurement")
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.makemore, "makemore.py")):
        p.error(f"no makemore.py in {args.makemore}")
    sys.path.insert(0, os.path.abspath(args.makemore))
    import makemore as mm
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, leaky {leaky.__version__}, 1 thread, median of {args.steps} steps")
    print("| model | plain ms | audited ms | ratio | mean ratio |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        path = names_file(folder)
        for kind in args.kinds:
            for _ in range(args.pairs):
                plain, audited, plain_mean, audited_mean = measure(mm, path, kind, args.steps)
                print(f"| {kind} | {1e3 * plain:.2f} | {1e3 * audited:.2f} | {audited / plain:.2f}x "
                      f"| {audited_mean / plain_mean:.2f}x |")
                if args.audit_run:
                    plain, whole, _, _ = measure(mm, path, kind, args.steps, AuditConfig().steps)
                    print(f"| {kind}, a {AuditConfig().steps}-step audit (ms in all) | {1e3 * plain:.1f} "
                          f"| {1e3 * whole:.1f} | {whole / plain:.2f}x | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
