"""Statistics added by name: one derive function per field, read by checks as `stats.derived[name]`.

The statistics of AuditStats are computed in assemble.py. A capability that adds an
instrument (record/instruments/) adds the function that turns its part of the run's
record into a statistic as one file in this package (found on import), with no edit to
AuditStats or assemble.py:

    # leaky/derive/fields/output_peaks.py
    @derived("output_peaks")
    def output_peaks(run: RunRecord, sums) -> dict[str, float]:
        return {name: float(peak) for name, peak in run.parts["output_peaks"].items()}

It is called once per snapshot (the end of an audit, a watch's check pass) with the
RunRecord and the running sums (StatsBuilder), after the built-in statistics, and must not
change either. Its value should be plain host data (numbers, strings, tuples, dicts of
them): checks and reports read it, and a store may keep it.
"""
from __future__ import annotations

from typing import Any, Callable

from leaky.record.run_record import RunRecord
from leaky.registry import Registry, discover

Derive = Callable[[RunRecord, Any], Any]
DERIVED: Registry = Registry("a derived statistic")   # name -> the function that computes it
restored = DERIVED.restored   # the registry as it was, after the block (tests)


def derived(name: str) -> Callable[[Derive], Derive]:
    """Register the function that computes `stats.derived[name]`."""
    return lambda fn: DERIVED.add(name, fn)


def derive_all(run: RunRecord, sums) -> dict[str, Any]:
    """Every registered statistic of this run."""
    return {name: fn(run, sums) for name, fn in DERIVED.items()}


discover(__name__, __path__)
