"""The set-up of two runs side by side: what leaky saw of their optimizers, learning rates
and schedules, initialisations, dtypes and autocast, input scale and train/eval calls
(report-v1 `config`), and where each differs, with the line that set it.

Items are matched in order, not by module name, so a rename changes nothing here. A
number differs when it differs by more than chance could make it: a learning rate is set,
not drawn, so any difference counts; a weight's standard deviation over n elements has a
relative standard error of 1/sqrt(2n), so it differs beyond max(25%, 4 of those); an input's
scale beyond 2x.
"""
from __future__ import annotations

import math
import os

from leaky.numbers import num

INPUT_RATIO = 2.0
WEIGHT_FLOOR = 0.25


def _where(source) -> dict | None:
    return {"file": source["file"], "line": source["line"]} if isinstance(source, dict) and source.get("line") else None


def _row(what: str, a, b, source_a=None, source_b=None, kind: str = "other", module: str | None = None) -> dict:
    return {"what": what, "kind": kind, "a": a, "b": b, "source_a": _where(source_a), "source_b": _where(source_b),
            "module": module}


def _optimizers(a: list[dict], b: list[dict]) -> list[dict]:
    rows = []
    for index, (x, y) in enumerate(zip(a, b)):
        if x.get("kind") != y.get("kind"):
            rows.append(_row(f"optimizer {index}", x.get("kind"), y.get("kind"), x.get("source"), y.get("source"),
                             "learning_rate"))
        lr_a, lr_b = (x.get("initial_lrs") or [None])[0], (y.get("initial_lrs") or [None])[0]
        if lr_a != lr_b:
            rows.append(_row(f"optimizer {index} learning rate", num(lr_a), num(lr_b), x.get("source"),
                             y.get("source"), "learning_rate"))
        range_a, range_b = (x.get("lr_range") or [None])[0], (y.get("lr_range") or [None])[0]
        if _range_differs(range_a, range_b):
            sched_a, sched_b = x.get("scheduler") or {}, y.get("scheduler") or {}
            rows.append(_row(f"optimizer {index} learning rate over the steps", _span(range_a), _span(range_b),
                             sched_a.get("step_source") or sched_a.get("source"),
                             sched_b.get("step_source") or sched_b.get("source"), "learning_rate"))
        sched_a, sched_b = x.get("scheduler") or {}, y.get("scheduler") or {}
        if sched_a.get("kind") != sched_b.get("kind") or sched_a.get("step_calls") != sched_b.get("step_calls"):
            rows.append(_row(f"optimizer {index} scheduler", _schedule(sched_a), _schedule(sched_b),
                             sched_a.get("step_source") or sched_a.get("source"),
                             sched_b.get("step_source") or sched_b.get("source"), "learning_rate"))
    if len(a) != len(b):
        rows.append(_row("optimizers", f"{len(a)}", f"{len(b)}", kind="learning_rate"))
    return rows


def _range_differs(x, y) -> bool:
    if not x or not y:
        return bool(x) != bool(y)
    return any(abs(math.log(p / q)) > math.log(1.1) for p, q in zip(x, y) if p and q and p > 0 and q > 0)


def _span(lr_range) -> str | None:
    if not lr_range:
        return None
    low, high = lr_range
    return num(low) if low == high else f"{num(high)} down to {num(low)}"


def _schedule(scheduler: dict) -> str:
    if not scheduler:
        return "none"
    return f"{scheduler.get('kind')}, step() called {scheduler.get('step_calls', 0)} times"


def _weights(a: list[dict], b: list[dict]) -> list[dict]:
    rows = []
    for x, y in zip(a, b):
        std_a, std_b = x.get("std"), y.get("std")
        if not isinstance(std_a, (int, float)) or not isinstance(std_b, (int, float)) or std_a <= 0:
            continue
        elements = math.prod(x.get("shape") or [1])
        tolerance = max(WEIGHT_FLOOR, 4.0 / math.sqrt(2.0 * max(elements, 1)))
        if abs(std_b / std_a - 1.0) > tolerance:
            name = ".".join(part for part in (y.get("module"), y.get("param")) if part)
            rows.append(_row(f"initial std of {name}", num(std_a), num(std_b),
                             x.get("init_source"), y.get("init_source"), "init", y.get("module")))
    return rows


def _inputs(a: list[dict], b: list[dict]) -> list[dict]:
    rows = []
    for x, y in zip(a, b):
        rms_a, rms_b = x.get("rms"), y.get("rms")
        if isinstance(rms_a, (int, float)) and isinstance(rms_b, (int, float)) and rms_a > 0 and rms_b > 0 \
                and abs(math.log(rms_b / rms_a)) > math.log(INPUT_RATIO):
            rows.append(_row(f"input scale into {y.get('module') or y.get('op')} (root mean square)", num(rms_a),
                             num(rms_b), x.get("made_source") or x.get("source"),
                             y.get("made_source") or y.get("source"), "input", y.get("module")))
    return rows


def _modes(a: list[dict], b: list[dict]) -> list[dict]:
    """The train()/eval() calls, as a sequence of modes (not the modules' names or classes,
    which a rename changes). Where they part, the line in B is B's call there, or, when B
    makes fewer calls, its last one: the mode it leaves the model in."""
    def said(calls):
        return ", ".join(f"{c.get('module') or c.get('type')}.{c.get('mode')}()" for c in calls) or "none"

    if [c.get("mode") for c in a] == [c.get("mode") for c in b]:
        return []
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x.get("mode") != y.get("mode")), min(len(a), len(b)))
    x = a[first] if first < len(a) else {}
    y = b[first] if first < len(b) else (b[-1] if b else {})
    row = _row("train/eval calls", said(a), said(b), x.get("source"), y.get("source"), "mode")
    if first >= len(b) and b:
        row["why"] = (f"train/eval calls: B's last is {said([y])} at {line_text(y.get('source'))}, which stays in force; "
                       f"A then calls {said([x])} at {line_text(x.get('source'))}")
    return [row]


def line_text(source: dict | None) -> str:
    """A report's `{file, line}` as a person reads it: train.py:12."""
    return "an unknown line" if not source else f"{os.path.basename(source['file'])}:{source['line']}"


def compare_config(a: dict, b: dict) -> list[dict]:
    """The set-up differences of two reports (their `config`), each with its lines."""
    x, y = a.get("config") or {}, b.get("config") or {}
    rows = _optimizers(x.get("optimizers") or [], y.get("optimizers") or [])
    rows += _weights(x.get("weights") or [], y.get("weights") or [])
    if (x.get("dtypes") or {}) != (y.get("dtypes") or {}):
        rows.append(_row("parameter dtypes", _counts(x.get("dtypes")), _counts(y.get("dtypes")), kind="dtype"))
    casts_a = sorted((c.get("kind"), c.get("dtype")) for c in x.get("casts") or [])
    casts_b = sorted((c.get("kind"), c.get("dtype")) for c in y.get("casts") or [])
    if casts_a != casts_b:
        rows.append(_row("autocast and casts", _casts(casts_a), _casts(casts_b),
                         next((c.get("source") for c in x.get("casts") or []), None),
                         next((c.get("source") for c in y.get("casts") or []), None), "dtype"))
    rows += _inputs(x.get("inputs") or [], y.get("inputs") or [])
    rows += _modes(x.get("modes") or [], y.get("modes") or [])
    return rows


def _counts(dtypes) -> str:
    return ", ".join(f"{n} {name}" for name, n in sorted((dtypes or {}).items())) or "none"


def _casts(casts) -> str:
    return ", ".join(f"{kind} {dtype}" for kind, dtype in casts) or "none"
