"""N(0, 1) weights in an 8-layer ReLU MLP at fan-in 64 multiply the signal by ~sqrt(64/2)=5.7 per layer: the first loss is ~1e7 and training goes NaN. Fix: Kaiming init."""
import contextlib
import io
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()


def patch(src, old, new):
    """Replace one exact snippet of train.py (fails loudly if the script changed)."""
    assert src.count(old) == 1, f"snippet not found exactly once: {old!r}"
    return src.replace(old, new)


def run(src):
    """Execute a (possibly patched) train.py as __main__, quietly; return its globals.
    `_initial` maps id(param) -> the value the parameter had at its module's first forward."""
    initial = {}

    def snapshot(module, args):
        for p in module.parameters():
            if id(p) not in initial:
                initial[id(p)] = p.detach().clone()

    handle = torch.nn.modules.module.register_module_forward_pre_hook(snapshot)
    ns = {"__name__": "__main__", "__file__": str(HERE / "train.py")}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(src, str(HERE / "train.py"), "exec"), ns)
    finally:
        handle.remove()
    ns["_initial"] = initial
    return ns


def change(ns, params):
    """Largest absolute change of any element of `params` since their first forward."""
    return max((p.detach().float() - ns["_initial"][id(p)].float()).abs().max().item() for p in params)


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs)


def verdict(symptom, fixed, details):
    for line in details:
        print(line)
    print(f"symptom reproduced: {symptom}")
    print(f"fix removes it:     {fixed}")
    ok = bool(symptom and fixed)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)
import math

short = patch(SRC, "range(200)", "range(60)")
bug = run(short)
fix = run(patch(short, "nn.init.normal_(layer.weight, mean=0.0, std=1.0)",
                "nn.init.kaiming_normal_(layer.weight, nonlinearity=\"relu\")"))


def layer_rms(ns):
    torch.manual_seed(0)
    model = ns["ActivityNet"]()
    x, _ = ns["make_activity_data"]()
    rms, h = [], x[:256]
    with torch.no_grad():
        for layer in model.hidden:
            h = torch.relu(layer(h))
            rms.append(h.pow(2).mean().sqrt().item())
    return rms


bug_rms, fix_rms = layer_rms(bug), layer_rms(fix)
bug_nan = next((i for i, v in enumerate(bug["history"]) if not math.isfinite(v)), None)
verdict(bug_rms[-1] / bug_rms[0] > 1e4 and bug["history"][0] > 1e4 and bug_nan is not None,
        all(math.isfinite(v) for v in fix["history"]) and fix_rms[-1] / fix_rms[0] < 10
        and mean(fix["history"][-10:]) < 0.5,
        [f"activation RMS after hidden layer 1 -> 8 at init: bug {bug_rms[0]:.3g} -> {bug_rms[-1]:.3g}, "
         f"fix {fix_rms[0]:.3g} -> {fix_rms[-1]:.3g}",
         f"bug: first loss {bug['history'][0]:.3g}, first non-finite loss at step {bug_nan}",
         f"fix: first loss {fix['history'][0]:.3g}, mean of the last 10 of 60 steps {mean(fix['history'][-10:]):.3f}"])
