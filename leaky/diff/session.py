"""`leaky diff`: get the two sides (reports, stored runs, or runs made here), measure the
noise, compare, and wrap the result as `leaky/diff-v1`.

A side made here is a short audited run of the program (`leaky.rerun`, as `leaky fix`
runs it: its seeds as the user set them, stopped after K optimizer steps). When A is a
program, it is run R more times with its seeds shifted by 1..R, and how far those runs
drift from A is the noise (leaky/diff/noise.py). Reports and stored runs cannot be run
again: the noise then comes from the spread over their own steps, and the result says so.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable

import torch

from leaky.diff.compare import compare
from leaky.diff.noise import Noise, from_reruns
from leaky.version import __version__

SCHEMA = "leaky/diff-v1"
REPORT = "leaky/report-v1"


class DiffError(Exception):
    """The comparison cannot be made: a one-line reason (exit status 2)."""


@dataclass
class Side:
    """One run to compare: its report-v1 dict, and where it came from."""

    label: str
    kind: str                     # "report" | "stored" | "run" | "example"
    report: dict
    program: Callable[[], None] | None = None   # how to run it again (for the noise), if it can be
    status: str | None = None
    notes: list[str] = field(default_factory=list)

    def header(self) -> dict:
        return {"label": self.label, "kind": self.kind, "steps": len(self.report.get("series") or []),
                "status": self.status, "notes": self.notes}


def report_file(path: str) -> Side:
    """A side from a `leaky audit --json` / `leaky watch --json` file."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise DiffError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise DiffError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("schema") != REPORT:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise DiffError(f"{path} is not a leaky report (schema {found!r}, expected {REPORT!r}: write one with "
                        f"`leaky audit --json {os.path.basename(path)} train.py`)")
    return Side(path, "report", data, status=(data.get("run") or {}).get("status"))


def stored_run(store_path: str, key: str) -> Side:
    """A side from a run store (`leaky watch` keeps each run's final report there)."""
    from leaky.store import Store, StoreError, resolve_run

    if not os.path.exists(store_path):
        raise DiffError(f"no run store at {store_path} (give --store PATH, or a report's .json file)")
    try:
        with Store(store_path) as store:
            run_id = resolve_run(store, key)
            info = store.run(run_id)
            data = store.report(run_id)
    except (StoreError, KeyError, ValueError) as exc:
        raise DiffError(str(exc.args[0] if exc.args else exc)) from None
    if data is None:
        raise DiffError(f"run {run_id} in {store_path} has no stored report (it is still running, it was "
                        f"stopped before its end, or an older leaky wrote it)")
    label = f"run {run_id} ({os.path.basename(info.get('script') or '?')})"
    return Side(label, "stored", data, status=info.get("status"))


def made_run(label: str, kind: str, program: Callable[[], None], steps: int, offset: int = 0,
             on_step: Callable[[int, int], None] | None = None) -> Side:
    """A side made here: the program audited for `steps` optimizer steps, its seeds shifted
    by `offset`."""
    from leaky.rerun.trial import run_trial

    # NOTE: the step control stops the program one step after the audit's last, so the audit
    # ends its K-th step in full
    trial = run_trial(program, None, offset, steps + 1, 0, steps, label=label, on_step=on_step,
                      fresh_imports=True)
    if trial.report is None or not trial.steps:
        why = trial.error or "no optimizer step was observed"
        raise DiffError(f"{label} made no optimizer step to compare ({why})")
    notes = [f"stopped after {trial.steps} of {steps} steps: {trial.error}"] if trial.error else []
    return Side(label, kind, trial.report.to_dict(), program, trial.status, notes)


def measure_noise(a: Side, reruns: int, steps: int | None = None,
                  progress: Callable[[str], None] | None = None,
                  on_step: Callable[[int, int], None] | None = None) -> tuple[Noise, list[dict]]:
    """How far A drifts from itself by chance: A run again `reruns` times with its seeds
    shifted by 1..R, when it is a program; otherwise only the spread over its own steps."""
    if a.program is None or not reruns:
        return Noise("steps"), []
    again = []
    for offset in range(1, reruns + 1):
        if progress is not None:
            progress(f"A again with its seeds shifted by {offset}, for the noise ({offset}/{reruns})")
        again.append(made_run(a.label, a.kind, a.program, steps or len(a.report.get("series") or []),
                              offset, on_step).report)
    return from_reruns(a.report, again), again


def diff(a: Side, b: Side, reruns: int = 2, steps: int | None = None,
         progress: Callable[[str], None] | None = None,
         on_step: Callable[[int, int], None] | None = None,
         noise: tuple[Noise, list[dict]] | None = None) -> dict:
    """The `leaky/diff-v1` comparison of B against A. `noise`: measure_noise's result, when
    it was measured already (several B against one A)."""
    noise, again = noise or measure_noise(a, reruns, steps, progress, on_step)
    result = compare(a.report, b.report, noise, again)
    return {"schema": SCHEMA, "leaky_version": __version__, "torch_version": torch.__version__,
            "a": a.header(), "b": b.header(), **result}


def unusable(reason: str, a: Side | None = None, b: Side | None = None) -> dict:
    """The result when no comparison could be made."""
    return {"schema": SCHEMA, "leaky_version": __version__, "torch_version": torch.__version__,
            "a": a.header() if a else None, "b": b.header() if b else None, "verdict": "unusable",
            "reason": reason, "noise": None, "first_parted": None, "sites": [], "loss": [], "config": [],
            "findings": {"only_a": [], "only_b": [], "both": []}, "flow": []}
