"""Snapshot of what leaky reports on every built-in example, to compare two versions.

    python benchmarks/examples_snapshot.py --out before.json          # on one version
    python benchmarks/examples_snapshot.py --out after.json           # on the other
    python benchmarks/examples_snapshot.py --compare before.json after.json

For each example of leaky.zoo (20 steps, seed 0, as `leaky demo` and the tests run them):
every finding's code, severity, module, op, source line (file name and line), step, the
numbers of its evidence rounded to 3 significant digits, its message and fix, and the gradient-flow table's
rows (module, grad norm in, gain, zeroed, dead, saturated), rounded the same way. A
redesign that changes no behaviour leaves the two files equal; --compare lists what
differs and exits 1 if anything does.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys

import torch


def _round(value):
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value == 0:
            return str(value) if not math.isfinite(value) else 0.0
        return float(f"{value:.3g}")
    if isinstance(value, (list, tuple)):
        return [_round(v) for v in value]
    if isinstance(value, dict):
        return {k: _round(v) for k, v in sorted(value.items())}
    return str(value)


def _finding(f) -> dict:
    source = None if f.source is None else f"{os.path.basename(f.source.file)}:{f.source.line}"
    return {"code": f.code, "severity": f.severity.value, "module": f.module, "op": f.op, "source": source,
            "step": f.step, "evidence": _round(f.evidence), "message": _text(f.message), "fix": _text(f.fix)}


def _text(text: str) -> str:
    """A message without this checkout's path (examples live inside the package)."""
    return text.replace(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "<repo>")


def snapshot() -> dict:
    from leaky.demo import audit_example
    from leaky.zoo import EXAMPLES

    torch.set_num_threads(1)
    result = {}
    for name in sorted(EXAMPLES):
        gc.collect()   # NOTE: a GradScaler left alive by the example before is found by a gc scan
        torch.manual_seed(0)
        report = audit_example(EXAMPLES[name], steps=20, seed=0)
        data = report.to_dict()
        rows = [{k: _round(row.get(k)) for k in ("module", "grad_norm", "gain", "zeroed_share", "dead_share",
                                                 "saturated_share")} for row in data["modules"]]
        result[name] = {"findings": [_finding(f) for f in report.findings], "modules": rows}
        print(f"{name}: {len(report.findings)} findings", file=sys.stderr)
    return result


def compare(before: dict, after: dict) -> list[str]:
    diffs = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a != b:
            if a is None or b is None:
                diffs.append(f"{name}: only in {'after' if a is None else 'before'}")
                continue
            for key in ("findings", "modules"):
                if a[key] != b[key]:
                    diffs.append(f"{name} {key}:\n  before {json.dumps(a[key])}\n  after  {json.dumps(b[key])}")
    return diffs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the snapshot here")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two snapshots")
    args = parser.parse_args()
    if args.compare:
        before, after = (json.load(open(path)) for path in args.compare)
        diffs = compare(before, after)
        print("\n".join(diffs) if diffs else f"the same: {len(before)} examples")
        return 1 if diffs else 0
    data = snapshot()
    text = json.dumps(data, indent=1, sort_keys=True)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
