"""Instruments added to every recorder: one file each, a context manager plus its part of the record.

The recorder's hot path (op mode, node hooks, units, sites, modules, parameters, the
monitor) and its built-in instruments are assembled in recorder.py. A capability that
needs data none of them records adds an instrument as one file in this package (found on
import, as checks are: no list to edit), with no edit to the recorder:

    # leaky/record/instruments/output_peaks.py
    @instrument("output_peaks")
    class OutputPeaks:
        def __init__(self, host: InstrumentHost) -> None: ...   # what it may ask, nothing more
        def __enter__(self): ...            # install its hooks
        def __exit__(self, *exc): ...       # remove them: called on any exit, errors included
        def end_step(self, step: int) -> None: ...   # optional: a step ended
        def part(self): ...                 # its part of the RunRecord (RunRecord.parts[name])

Each recorder makes one of every registered instrument (a factory that returns None opts
out, e.g. when a config flag is off), enters them in its ExitStack after its own, and
leaves them in reverse order. `part()` is called at each snapshot (the end of an audit, a
watch's check pass): it returns what derive/ reads, frozen or copied, never live state.
Its device values stay on the device until then (one copy per snapshot, in derive/).
The derive function that reads a part is registered in derive/fields/.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

from leaky.registry import Registry, discover


class InstrumentHost(Protocol):
    """What an added instrument may ask of the recorder that makes it."""

    config: Any            # AuditConfig
    modules: Any           # ModuleTracker: a module's key (key_of) and its name (name)
    observing: bool        # this step is observed in detail (an audit: every step until the limit)
    step: int              # the index of the step being recorded

    def guarded(self, fn: Callable[..., Any], *args: Any) -> Any: ...   # leaky's failure never stops training

    def norm_wanted(self) -> bool:
        """Whether the every-step monitor would take a norm of the script's (`offer_norm`) this
        step: a watch's unsampled step whose own norm is not due (record/budget.py)."""

    def offer_norm(self, norm: Any, max_norm: float, params: int) -> None:
        """A clip_grad_norm_ over `params` parameters returned `norm` (0-d) with `max_norm`:
        the monitor keeps the clipped gradients' norm as the step's if the step's optimizer
        holds as many parameters."""

    def clock(self) -> float: ...                        # a watch's budget clock (record/budget.py)

    def own_time(self, seconds: float) -> None:
        """Time an instrument spent on a watch's every-step path (the budget counts it)."""

    def across_ranks(self, provide: Callable[[], list], receive: Callable[[list], None]) -> None:
        """With several ranks, at each batched flush of the series (every rank flushes the same
        steps): `provide()`'s 0-d tensors are summed over the ranks in the flush's one all-reduce
        and handed to `receive`. `provide` must give as many values on every rank."""


Factory = Callable[[InstrumentHost], Any]
INSTRUMENTS: Registry = Registry("an instrument")   # name -> its factory
restored = INSTRUMENTS.restored   # the registry as it was, after the block (tests)


def instrument(name: str) -> Callable[[Factory], Factory]:
    """Register an instrument under `name`: its part is RunRecord.parts[name]."""
    return lambda make: INSTRUMENTS.add(name, make)


def made(host: InstrumentHost) -> dict[str, Any]:
    """One of each registered instrument for this recorder (those whose factory opts out are left out)."""
    made = {name: make(host) for name, make in INSTRUMENTS.items()}
    return {name: inst for name, inst in made.items() if inst is not None}


discover(__name__, __path__)
