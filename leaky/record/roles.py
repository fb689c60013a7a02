"""What each instrument may ask of the recorder that enters it: one narrow protocol each.

An instrument is handed the recorder, but types it by its role here, so it names (and a
reader sees) only what it uses, and no file of record/ imports recorder.py but the ones it
assembles: with typing-only imports counted, record/ has no import cycle. A leaf.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol


class Guarded(Protocol):
    """Runs leaky's own work so that its failure never stops training."""

    def guarded(self, fn: Callable[..., Any], *args: Any) -> Any: ...


class CallSink(Guarded, Protocol):
    """Where an observed call goes: OpMode's torch calls, CustomFunctions's custom Functions."""

    observing: bool
    modules: Any                    # ModuleTracker

    def on_op(self, name: str, args: tuple, kwargs: dict, out: Any) -> Any: ...


class OpHost(CallSink, Protocol):
    """What OpMode tells the recorder besides each op: a loss call that failed, an internal
    failure; cuts, inits and made leaves go to its CutRecords."""

    provenance: Any                 # Provenance
    cut_records: Any                # CutRecords: cuts, leaves made, in-place inits

    def fail(self, exc: BaseException) -> None: ...
    def note_loss_failure(self, *args: Any) -> None: ...


class FunctionHost(CallSink, Protocol):
    """CustomFunctions also names where a custom Function was called."""

    locator: Any                    # SourceLocator


class CompiledHost(Guarded, Protocol):
    """CompiledCalls turns the recorder's instruments off around compiled code, and calls
    the optimizer step hooks around a compiled step."""

    active: bool
    modules: Any                    # ModuleTracker
    origins: Any                    # OriginRecords

    def left_out(self) -> Any: ...
    def step_hooks_off(self) -> Any: ...
    def _before_opt_step(self, optimizer: Any, args: tuple, kwargs: dict) -> None: ...
    def _after_opt_step(self, optimizer: Any, args: tuple, kwargs: dict) -> None: ...


class Observed(Protocol):
    """What a RunRecord is read from (record/run_record.py `snapshot`)."""

    config: Any
    backward_calls: int
    backward_at: Any
    saw_optimizer: bool
    _optimizer_exists: Any
    heap: Any
    compiled: Any
    moving: Any
    coupling: Any
    optimizers: Any
    units: Any
    cut_records: Any
    feedback: Any
    batch: Any
    bypass: Any
    functions: Any
    sites: Any
    modules: Any
    params: Any
    origins: Any
    taps: Any
    added: Any                      # the instruments of record/instruments/, by name
