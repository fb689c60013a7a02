"""Run: python benchmarks/scale.py [--quick]   (from the repository root)

    python benchmarks/scale.py --quick          # a 2-layer d_model 256 GPT and fewer rounds, ~30 s
    python benchmarks/scale.py --markdown       # GPT-2 small (124M parameters), ~1-1.5 min on 2 cores

How `leaky.audit()` scales, in two parts.

(a) A GPT-2-small-sized model on the CPU: 12 pre-norm layers (nn.TransformerEncoderLayer,
norm_first=True, batch_first=True, GELU, dropout 0.1), d_model 768, 12 heads, a 50257-token
vocabulary, 1024 learned positions, a causal mask, and the LM head tied to the token embedding
(~124M parameters), randomly initialised, trained with AdamW on one fixed batch of 2 x 64
tokens. Time: one model in this process; after a warm-up step of each mode, --gpt-rounds
rounds of (one plain step; one step inside a fresh `leaky.audit(steps=None)`), each step
timed on its own, the audit's exit (folding statistics) timed apart; the ratio is the
median of the per-round ratios. The audited step is the first one of its audit, so it
carries whatever an audit does once on entry: a conservative figure.
Memory: each mode in its own fresh subprocess (so peaks do not mix), which builds the model
and the batch, reads its peak resident set so far (VmHWM in /proc/self/status, else
ru_maxrss), runs --mem-steps steps (the
first allocates AdamW's state) plainly or inside one `leaky.audit(steps=None)`, and reads
the peak again after leaving the audit, and once more after building the report. Reported:
the peak RSS and its growth over the pre-training baseline, and the ratio of each to plain.
Targets: time ratio <= 2x, peak-memory ratio <= 1.2x.

(b) Cost growth: an MLP of Linear+ReLU layers, batch 64, Adam, with depth in {10, 50, 200}
(width 64) and width in {32, 128, 512, 1024} (depth 10). Plain and audit blocks of --steps
steps interleaved in rounds in this process (the audit entered and left once per block, as in
audit_overhead.py). Per configuration: ms/step plain and audit, their ratio, the op sites
audited per step (len(audit.recorder.sites.sites): each runs once per step in an MLP), the
audit's extra time per op ((audit - plain) / ops), the exit (once per audit) and the time
to build the report. A constant extra per op across depths means the cost is linear in the
number of ops; with width the extra per op grows with the tensors' size (each op's norms
are reductions over its output and gradient), i.e. with the work itself.

Use --threads 1 (the default) on a machine whose cores are shared.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import leaky  # noqa: E402

from _harness import bracketing_reference  # noqa: E402
from _tables import print_table  # noqa: E402

TIME_TARGET, MEMORY_TARGET = 2.0, 1.2


# -- (a) GPT-2 small ----------------------------------------------------------------------
class GPT(nn.Module):
    def __init__(self, vocab: int, n_ctx: int, d_model: int, heads: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(n_ctx, d_model)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=dropout,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight               # tied, as in GPT-2
        for module in self.modules():                    # GPT-2's initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        h = self.drop(self.tok(tokens) + self.pos(torch.arange(seq, device=tokens.device)))
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=tokens.device)
        h = self.blocks(h, mask=mask, is_causal=True)
        return self.head(self.norm(h))


def gpt_config(quick: bool) -> dict:
    if quick:
        return dict(vocab=50257, n_ctx=1024, d_model=256, heads=4, layers=2, dropout=0.1)
    return dict(vocab=50257, n_ctx=1024, d_model=768, heads=12, layers=12, dropout=0.1)


def build_gpt(quick: bool, batch: int, seq: int, seed: int):
    torch.manual_seed(seed)
    cfg = gpt_config(quick)
    model = GPT(**cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    tokens = torch.randint(0, cfg["vocab"], (batch, seq + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()

    return model, step


def _maxrss_mb() -> float:
    """This process's peak resident set, MB. VmHWM from /proc where there is one: Linux keeps
    ru_maxrss across exec, so a child started by a big parent (this script after the timed
    GPT run) would start from the parent's peak; VmHWM belongs to the new address space."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024                 # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024     # KiB on Linux


def memory_worker(args: argparse.Namespace) -> None:
    """In a fresh process: peak RSS of --mem-steps steps in one mode; prints one JSON line."""
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    model, step = build_gpt(args.quick, args.batch, args.seq, args.seed)
    out = {"mode": args.memory_worker, "params": sum(p.numel() for p in model.parameters()),
           "before_mb": _maxrss_mb()}
    start = time.perf_counter()
    if args.memory_worker == "audit":
        with leaky.audit(steps=None) as audit:
            for _ in range(args.mem_steps):
                step()
        out["peak_mb"] = _maxrss_mb()
        t = time.perf_counter()
        report = audit.report
        out["report_s"] = time.perf_counter() - t
        out["report_peak_mb"] = _maxrss_mb()
        out["findings"] = sorted({f.code for f in report.findings})
        out["error"] = audit.recorder.error
    else:
        for _ in range(args.mem_steps):
            step()
        out["peak_mb"] = _maxrss_mb()
    out["steps_s"] = time.perf_counter() - start
    print("MEMORY " + json.dumps(out), flush=True)


def run_memory(mode: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-worker", mode, "--threads", str(args.threads),
           "--mem-steps", str(args.mem_steps), "--batch", str(args.batch), "--seq", str(args.seq),
           "--seed", str(args.seed)] + (["--quick"] if args.quick else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("MEMORY "):
            return json.loads(line[len("MEMORY "):])
    print(f"\nmemory worker for {mode} failed (exit code {proc.returncode}):\n{proc.stdout}\n{proc.stderr}",
          file=sys.stderr)
    return {"mode": mode, "failed": True}


def bench_gpt(args: argparse.Namespace) -> dict:
    model, step = build_gpt(args.quick, args.batch, args.seq, args.seed)
    params = sum(p.numel() for p in model.parameters())
    label = "GPT-2 small" if not args.quick else "mini GPT (2 layers, d_model 256)"
    print(f"(a) {label}: {params / 1e6:.1f}M parameters, batch {args.batch} x {args.seq} tokens", file=sys.stderr,
          flush=True)
    plain, audited, exits, ratios = [], [], [], []
    info: dict = {"params": params}

    def audited_step() -> tuple[float, float]:
        audit = leaky.audit(steps=None)
        audit.__enter__()
        try:
            t = time.perf_counter()
            step()
            dt = time.perf_counter() - t
        finally:
            t = time.perf_counter()
            audit.__exit__(None, None, None)
        info["ops"] = len(audit.recorder.sites.sites)
        if audit.recorder.error:
            info["error"] = audit.recorder.error
        info["last_audit"] = audit
        return dt, time.perf_counter() - t

    t0 = time.perf_counter()
    step()                      # warm-up: allocates AdamW's state
    audited_step()
    print(f"  warm-up {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    for r in range(args.gpt_rounds):
        t = time.perf_counter()
        step()
        plain.append(time.perf_counter() - t)
        dt, ex = audited_step()
        audited.append(dt)
        exits.append(ex)
        ratios.append(dt / plain[-1])
        print(f"  round {r + 1}: plain {plain[-1]:.2f}s, audit {dt:.2f}s (exit {ex:.2f}s)", file=sys.stderr,
              flush=True)
    audit = info.pop("last_audit")
    try:
        t = time.perf_counter()
        report = audit.report
        info["report_s"] = time.perf_counter() - t
        info["findings"] = sorted({f.code for f in report.findings})
    except Exception:
        print("\nbuilding the GPT audit's report failed:", file=sys.stderr)
        traceback.print_exc()
        info["report_error"] = traceback.format_exc().strip().splitlines()[-1]
    model = step = audit = None     # free the GPT (~2 GB with AdamW state) before the memory runs
    memory = {}
    for mode in ("plain", "audit"):
        t = time.perf_counter()
        memory[mode] = run_memory(mode, args)
        print(f"  memory worker {mode}: {time.perf_counter() - t:.1f}s", file=sys.stderr, flush=True)
    return {"label": label, "plain_s": plain, "audit_s": audited, "exit_s": exits, "ratios": ratios,
            "memory": memory, **info}


def print_gpt(res: dict, args: argparse.Namespace) -> None:
    mem = res["memory"]
    ok = not any(m.get("failed") for m in mem.values())
    p_ms, a_ms = 1e3 * statistics.median(res["plain_s"]), 1e3 * statistics.median(res["audit_s"])
    ratio = statistics.median(res["ratios"])
    header = ("mode", "ms/step (median)", "time ratio", "peak RSS MB", "peak ratio", "RSS growth MB",
              "growth ratio")
    rows = [("plain", f"{p_ms:.0f}", "1.00x")]
    rows.append(("audit", f"{a_ms:.0f}", f"{ratio:.2f}x"))
    if ok:
        pp, ap = mem["plain"]["peak_mb"], mem["audit"]["peak_mb"]
        pg, ag = pp - mem["plain"]["before_mb"], ap - mem["audit"]["before_mb"]
        rows[0] += (f"{pp:.0f}", "1.00x", f"{pg:.0f}", "1.00x")
        rows[1] += (f"{ap:.0f}", f"{ap / pp:.2f}x", f"{ag:.0f}", f"{ag / pg:.2f}x")
    else:
        rows = [r + ("failed",) * 4 for r in rows]
    print(f"(a) {res['label']}: {res['params'] / 1e6:.1f}M parameters, AdamW, batch {args.batch} x {args.seq} "
          f"tokens, {args.threads} thread(s); time: {len(res['ratios'])} interleaved rounds after warm-up; "
          f"memory: {args.mem_steps} steps per fresh subprocess")
    print_table(header, rows, args.markdown)
    report = (f"{1e3 * res['report_s']:.0f} ms" if "report_s" in res else f"FAILED: {res.get('report_error')}")
    print(f"  per-round time ratios: {', '.join(f'{r:.2f}' for r in res['ratios'])}; audit exit (once per audit): "
          f"median {1e3 * statistics.median(res['exit_s']):.0f} ms; op sites per step: {res.get('ops')}; "
          f"building the report: {report}")
    if ok:
        a = mem["audit"]
        print(f"  memory baseline (imports, model, batch) before training: plain {mem['plain']['before_mb']:.0f} MB, "
              f"audit {a['before_mb']:.0f} MB; audit peak after building its report: {a['report_peak_mb']:.0f} MB "
              f"({a['report_s'] * 1e3:.0f} ms)")
        if a.get("error"):
            print(f"  LEAKY INTERNAL ERROR in the memory run: {a['error']}")
    if res.get("error"):
        print(f"  LEAKY INTERNAL ERROR in the timed audit: {res['error']}")
    findings = res.get("findings")
    if findings is not None:
        print(f"  audit findings on the random GPT: {', '.join(findings) or 'none'}")
    verdict_t = "within" if ratio <= TIME_TARGET else "ABOVE"
    line = f"  targets: time <= {TIME_TARGET:g}x: {verdict_t} ({ratio:.2f}x)"
    if ok:
        pr = mem["audit"]["peak_mb"] / mem["plain"]["peak_mb"]
        line += f"; peak memory <= {MEMORY_TARGET:g}x: {'within' if pr <= MEMORY_TARGET else 'ABOVE'} ({pr:.2f}x)"
    print(line)


# -- (b) cost growth ----------------------------------------------------------------------
def build_mlp(depth: int, width: int, batch: int, seed: int):
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    d_in = width
    for _ in range(depth):
        layers += [nn.Linear(d_in, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def bench_growth(depth: int, width: int, args: argparse.Namespace) -> dict:
    step = build_mlp(depth, width, 64, args.seed)
    info: dict = {}

    def block(mode: str) -> tuple[float, float]:
        audit = leaky.audit(steps=None) if mode == "audit" else None
        if audit is not None:
            audit.__enter__()
        try:
            t = time.perf_counter()
            for _ in range(args.steps):
                step()
            per_step = (time.perf_counter() - t) / args.steps
        finally:
            t = time.perf_counter()
            if audit is not None:
                audit.__exit__(None, None, None)
        exit_s = time.perf_counter() - t
        if audit is not None:
            info["ops"] = len(audit.recorder.sites.sites)
            info["audit"] = audit
            if audit.recorder.error:
                info["error"] = audit.recorder.error
        return per_step, exit_s

    for mode in ("plain", "audit"):
        block(mode)                                   # warm-up
    plain, audited, exits = [], [], []
    for _ in range(args.rounds):
        plain.append(block("plain")[0])
        dt, ex = block("audit")
        audited.append(dt)
        exits.append(ex)
    ref = bracketing_reference(plain)
    audit = info.pop("audit")
    t = time.perf_counter()
    try:
        n_ops_report = len(audit.report.ops)
        info["report_s"] = time.perf_counter() - t
        info["report_ops"] = n_ops_report
    except Exception:
        print(f"\nbuilding the report failed (depth {depth}, width {width}):", file=sys.stderr)
        traceback.print_exc()
        info["report_s"] = float("nan")
    p_ms, a_ms = 1e3 * statistics.median(plain), 1e3 * statistics.median(audited)
    return {"depth": depth, "width": width, "plain_ms": p_ms, "audit_ms": a_ms,
            "ratio": statistics.median(a / r for a, r in zip(audited, ref)),
            "extra_us_per_op": 1e3 * (a_ms - p_ms) / info["ops"], "exit_ms": 1e3 * statistics.median(exits),
            **info}


def print_growth(rows: list[dict], args: argparse.Namespace) -> None:
    header = ("depth", "width", "ops/step", "plain ms/step", "audit ms/step", "ratio", "extra µs/op",
              "audit exit ms", "report ms")
    body = [(str(r["depth"]), str(r["width"]), str(r["ops"]), f"{r['plain_ms']:.2f}", f"{r['audit_ms']:.2f}",
             f"{r['ratio']:.2f}x", f"{r['extra_us_per_op']:.0f}", f"{r['exit_ms']:.1f}",
             f"{1e3 * r['report_s']:.1f}") for r in rows]
    print(f"(b) cost growth: MLP (Linear+ReLU) x depth, batch 64, Adam; {args.rounds} interleaved rounds of "
          f"{args.steps}-step blocks; medians")
    print_table(header, body, args.markdown)
    for r in rows:
        if r.get("error"):
            print(f"  LEAKY INTERNAL ERROR at depth {r['depth']} width {r['width']}: {r['error']}")


# -- main ---------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a 2-layer d_model 256 GPT instead of GPT-2 small, and fewer rounds")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--part", choices=("all", "gpt", "growth"), default="all")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) (default 1)")
    p.add_argument("--gpt-rounds", type=int, default=5, help="timed GPT steps per mode (default 5)")
    p.add_argument("--mem-steps", type=int, default=3, help="steps per memory subprocess (default 3)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--depths", default="10,50,200")
    p.add_argument("--widths", default="32,128,512,1024")
    p.add_argument("--rounds", type=int, default=None, help="growth: interleaved rounds (default 7; 3 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="growth: steps per block (default 5; 3 with --quick)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memory-worker", choices=("plain", "audit"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.steps = args.steps or (3 if args.quick else 5)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.memory_worker:
        memory_worker(args)
        return 0
    print(f"torch {torch.__version__}, leaky {leaky.__version__}, threads {torch.get_num_threads()}"
          f"{', quick' if args.quick else ''}", flush=True)
    t0 = time.perf_counter()
    gpt = bench_gpt(args) if args.part in ("all", "gpt") else None
    t1 = time.perf_counter()
    growth = []
    if args.part in ("all", "growth"):
        configs = [(int(d), 64) for d in args.depths.split(",")]
        configs += [(10, int(w)) for w in args.widths.split(",") if (10, int(w)) not in configs]
        for depth, width in configs:
            t = time.perf_counter()
            growth.append(bench_growth(depth, width, args))
            print(f"  growth depth {depth} width {width}: {time.perf_counter() - t:.1f}s", file=sys.stderr,
                  flush=True)
    print(f"  total {time.perf_counter() - t0:.1f}s (GPT {t1 - t0:.1f}s)", file=sys.stderr, flush=True)
    print()
    if gpt is not None:
        print_gpt(gpt, args)
        print()
    if growth:
        print_growth(growth, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
