"""Run: python benchmarks/budget.py [--models ...] [--steps N] [--rounds R]   (from the repository root)

    python benchmarks/budget.py --models d10,d50,d200 --steps 600 --rounds 3
    python benchmarks/budget.py --models mlp,cnn,lstm,transformer --steps 200 --rounds 3
    python benchmarks/budget.py --models nanogpt,mingpt,dcgan,hf-gpt2 --steps 200 --rounds 3
    python benchmarks/budget.py --models heavy --steps 3000 --rounds 3
    python benchmarks/budget.py --models d10 --every 100     # a fixed interval instead of the budget
    python benchmarks/budget.py --models d10 --before /tmp/old-checkout   # and an older leaky's default watch

Does `leaky.watch()` keep to its overhead budget (`--overhead`, 2% by default) over a whole
run? Each run is one worker process (pinned to one CPU, one torch thread) that builds the
model, then times N training steps from the first: plain, or inside `leaky.watch()` at its
defaults (a store in a temporary file, as `leaky watch` keeps one) entered before the first
step, so the first step's one-time probes are in the time. The watch's exit (its last check
pass and report) is timed apart: it is paid once per run, after training. Each round runs
plain, watch, then plain again (the A/A control: how far this machine's noise alone moves a
ratio); a round's watch ratio is its watch time over the mean of its two plain times. The
table gives medians over rounds, with what the watch itself measured and reported
(`report.run["overhead"]`): the share it says it added, the steps it sampled, its plain step
and sampled-step extra, and how often the monitor took the gradient norm.

Models: d10, d50, d200 are narrow tanh MLPs of width 64 (batch 32, SGD); `heavy` is one
whose audited step costs about 50 plain steps (60 Linear(8, 8)+Tanh layers: per-op work is
all there is); mlp, cnn, lstm, transformer are audit_overhead.py's four; nanogpt, mingpt,
dcgan, hf-gpt2 are standins.py's; gpu-gpt and gpu-resnet are gpu.py's nanoGPT-sized GPT and
ResNet-18 on CUDA, each step ending in torch.cuda.synchronize() (gpu.py runs them; without
CUDA they run at smoke sizes on the CPU).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NARROW = {"d10": 10, "d50": 50, "d200": 200}


def _workload(name: str):
    import torch
    import torch.nn.functional as F
    from torch import nn

    sys.path.insert(0, HERE)
    if name in NARROW or name == "heavy":
        depth, width, batch = (NARROW[name], 64, 32) if name in NARROW else (60, 8, 8)
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.Tanh()]
        model = nn.Sequential(*layers, nn.Linear(width, 10))
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))

        def step():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return step
    if name.startswith("gpu-"):   # gpu.py's nanoGPT-sized GPT and ResNet-18, on CUDA (a CPU smoke without)
        import gpu
        device = "cuda" if torch.cuda.is_available() else "cpu"
        build = {"gpu-gpt": gpu.build_gpt, "gpu-resnet": gpu.build_resnet}[name]
        return build(device, device != "cuda").step
    from audit_overhead import BUILDERS
    if name in BUILDERS:
        return BUILDERS[name](False).step
    from standins import STANDINS
    return STANDINS[name](False).step


def worker(name: str, mode: str, steps: int, every: int | None, cpu: int | None) -> dict:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    step = _workload(name)
    import leaky.watch   # noqa: F401  in both modes, before the clock starts: importing is not training
    out: dict = {"model": name, "mode": mode}
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        if mode == "watch":
            interval = {} if every is None else {"every": every}   # an older leaky (--before): its own default
            watch = leaky.watch(store=os.path.join(folder, "runs.db"), **interval)
            watch.__enter__()
            try:
                for _ in range(steps):
                    step()
            finally:
                out["seconds"] = time.perf_counter() - start
                watch.__exit__(None, None, None)
                out["exit_seconds"] = time.perf_counter() - start - out["seconds"]
            out["overhead"] = watch.report.run.get("overhead") or {"sampled_steps": watch.report.run.get("sampled_steps"),
                                                                   "norm_every": 1}
            out["findings"] = sorted({f.code for f in watch.report.findings})
        else:
            for _ in range(steps):
                step()
            out["seconds"] = time.perf_counter() - start
    return out


def run_worker(name: str, mode: str, args, tree: str | None = None) -> dict:
    """One worker; `tree`: import leaky from this checkout instead (--before)."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", name, mode, "--steps", str(args.steps)]
    if args.every:
        command += ["--every", str(args.every)]
    if args.cpu is not None:
        command += ["--cpu", str(args.cpu)]
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{name} {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench(name: str, args) -> dict:
    ratios, controls, reports, exits, plains, before = [], [], [], [], [], []
    for _ in range(args.rounds):
        plain = run_worker(name, "plain", args)["seconds"]
        watched = run_worker(name, "watch", args)
        old = run_worker(name, "watch", args, tree=args.before) if args.before else None
        again = run_worker(name, "plain", args)["seconds"]
        reference = (plain + again) / 2
        if old is not None:
            before.append(old["seconds"] / reference)
        ratios.append(watched["seconds"] / reference)
        controls.append(again / plain)
        reports.append(watched["overhead"])
        exits.append(watched["exit_seconds"])
        plains.append(reference / args.steps)
        print(f"  {name}: plain {plain:.3f} s, watch {watched['seconds']:.3f} s, plain again {again:.3f} s: "
              f"{ratios[-1]:.3f}x (A/A {controls[-1]:.3f}); watch says {_pct(watched['overhead'].get('measured'))}, "
              f"{watched['overhead']['sampled_steps']} sampled, norm every {watched['overhead']['norm_every']}; "
              f"findings {','.join(watched['findings']) or '-'}"
              + (f"; before ({args.before}) {before[-1]:.3f}x, findings {','.join(old['findings']) or '-'}"
                 if old is not None else ""), file=sys.stderr, flush=True)
    middle = sorted(range(len(ratios)), key=lambda i: ratios[i])[len(ratios) // 2]
    said = reports[middle]
    return {"model": name, "plain_ms": statistics.median(plains) * 1e3, "ratio": statistics.median(ratios),
            "ratios": ratios, "control": statistics.median(controls), "controls": controls,
            "exit_ms": statistics.median(exits) * 1e3, "said": said,
            "before": statistics.median(before) if before else None, "befores": before}


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:.2f}%"


def table(rows: list[dict], args) -> str:
    how = f"every {args.every}" if args.every else "budget 2%"
    old = getattr(args, "before", None)
    lines = [f"| model | plain ms/step | watch ({how}) / plain, {args.steps} steps | A/A | watch says it added | "
             "sampled steps | plain step, sampled extra, monitor (watch's figures) | norm every | exit ms (once) |"
             + (" before: its default watch / plain |" if old else ""),
             "|---|---:|---:|---:|---:|---:|---|---:|---:|" + ("---:|" if old else "")]
    for r in rows:
        s = r["said"]
        tail = (f" {r['before']:.3f}x ({', '.join(f'{x:.3f}' for x in r['befores'])}) |" if old else "")
        lines.append(
            f"| {r['model']} | {r['plain_ms']:.2f} | {r['ratio']:.3f}x ({', '.join(f'{x:.3f}' for x in r['ratios'])}) | "
            f"{r['control']:.3f} | {_pct(s.get('measured'))} | {s['sampled_steps']} | "
            f"{s.get('plain_step_ms')} ms, +{s.get('sampled_extra_ms')} ms (first +{s.get('first_step_extra_ms')}), "
            f"+{s.get('monitor_ms')} ms | "
            f"{s.get('norm_every')} | {r['exit_ms']:.0f} |" + tail)
    return "\n".join(lines)


def budget_table(models: list[str], steps: int, rounds: int, cpu: int | None = None) -> str:
    """The table for `models`, for another script (gpu.py)."""
    args = argparse.Namespace(steps=steps, rounds=rounds, every=None, cpu=cpu, before=None)
    return table([bench(name, args) for name in models], args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="d10,d50,d200")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--every", type=int, default=None, help="a fixed interval instead of the budget")
    parser.add_argument("--cpu", type=int, default=None, help="pin every worker to this CPU")
    parser.add_argument("--before", metavar="TREE", help="also time the watch of another checkout (its default)")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.steps, args.every, args.cpu)))
        return 0
    rows = [bench(name, args) for name in args.models.split(",")]
    print(table(rows, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
