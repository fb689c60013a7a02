"""`leaky diff A B`: compare two training runs, and name the first op, from the loss toward
the inputs, where their gradient flow parted.

    from leaky.diff import compare_reports
    result = compare_reports(json.load(open("old.json")), json.load(open("new.json")))
    result["first_parted"]["meaning"]

The sides are report-v1 dicts (an audit's or a watch's `--json`, a stored run's report, or a
run made here: `session.made_run`). `align` pairs their sites; `noise` says how far chance
moves each statistic (from re-runs of A with shifted seeds, or from the spread over its
steps); `compare` walks from the loss and names the first site that parted, the line to
look at, the loss curves (`loss`) and the set-up differences (`config`). The result is the
`leaky/diff-v1` dict of docs/diff.md.
"""
from __future__ import annotations

from leaky.diff.session import SCHEMA, DiffError, Side, diff, made_run, measure_noise, report_file, stored_run


def compare_reports(a: dict, b: dict) -> dict:
    """The `leaky/diff-v1` comparison of two report-v1 dicts (the noise from their steps)."""
    return diff(Side("A", "report", a), Side("B", "report", b), reruns=0)


__all__ = ["SCHEMA", "DiffError", "Side", "compare_reports", "diff", "made_run", "measure_noise", "report_file",
           "stored_run"]
