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

import pkgutil
from contextlib import contextmanager
from importlib import import_module
from typing import Any, Callable, Iterator

from leaky.record.run_record import RunRecord

Derive = Callable[[RunRecord, Any], Any]
DERIVED: dict[str, Derive] = {}


def derived(name: str) -> Callable[[Derive], Derive]:
    """Register the function that computes `stats.derived[name]`."""
    def add(fn: Derive) -> Derive:
        if name in DERIVED:
            raise ValueError(f"a derived statistic named {name!r} is already registered")
        DERIVED[name] = fn
        return fn
    return add


def derive_all(run: RunRecord, sums) -> dict[str, Any]:
    """Every registered statistic of this run."""
    return {name: fn(run, sums) for name, fn in DERIVED.items()}


@contextmanager
def restored() -> Iterator[None]:
    """The registry as it was, after the block (for tests that register a statistic)."""
    before = dict(DERIVED)
    try:
        yield
    finally:
        DERIVED.clear()
        DERIVED.update(before)


def _discover() -> None:
    """Import every module of this package but its helpers (a leading underscore): each
    registers itself on import."""
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not module.name.startswith("_"):
            import_module(f"{__name__}.{module.name}")


_discover()
