"""Python's cyclic garbage collector while leaky observes.

An observed step keeps ~17 small Python objects per hooked node alive (0-d norms, their weak
references, hooks and their handles, records) until its flush, so the collector promotes
some at every second-generation pass, and every ~100 steps that makes it scan the whole
heap, torch's objects included: a pause that a deep model's short steps feel
(docs/performance.md). `FrozenHeap` freezes the objects alive when observing starts
(gc.freeze: left out of the collector's scans) and unfreezes them on exit. Reference
counting frees them as ever; only a reference cycle among them that becomes garbage
meanwhile waits for the exit to be collected. A process that froze objects itself (a server
before it forks) is left alone.

The live objects leaky looks for (an enabled GradScaler, an optimizer over the parameters
seen) are found here, by one scan each over `FrozenHeap.live_objects()`: `gc.get_objects()`
alone leaves out what the freeze froze, which is everything alive when observing started
and, after any scan, everything alive then.
"""
from __future__ import annotations

import gc
import warnings

import torch


class FrozenHeap:
    """Context manager: the objects alive on entry frozen until exit (see the module's note)."""

    def __init__(self) -> None:
        self.froze = False

    def __enter__(self) -> "FrozenHeap":
        if gc.get_freeze_count() == 0:
            gc.freeze()
            self.froze = True
        return self

    def __exit__(self, *exc) -> None:
        if self.froze:
            self.froze = False
            gc.unfreeze()

    def live_objects(self) -> list:
        """gc.get_objects(), frozen objects included (it leaves out what gc.freeze froze)."""
        if not self.froze:
            return gc.get_objects()
        gc.unfreeze()
        try:
            return gc.get_objects()
        finally:
            gc.freeze()

    def grad_scaler(self):
        """An enabled GradScaler alive now (torch.amp's, or torch.cuda.amp's on torch < 2.3), if any."""
        kinds = tuple(t for t in (getattr(torch.amp, "GradScaler", None),
                                  getattr(getattr(torch, "cuda", None) and torch.cuda.amp, "GradScaler", None))
                      if isinstance(t, type))
        if not kinds:
            return None
        return _first(self.live_objects(), lambda obj: isinstance(obj, kinds) and obj.is_enabled())

    def holds_optimizer_over(self, param_ids: set[int]) -> bool:
        """Whether an optimizer alive now holds one of these parameters (by id)."""
        def over(obj) -> bool:
            return isinstance(obj, torch.optim.Optimizer) and any(
                id(p) in param_ids for group in obj.param_groups for p in group["params"])
        return _first(self.live_objects(), over) is not None


def _first(objects: list, wanted):
    """The first of `objects` that `wanted` accepts; one that raises is passed over."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # isinstance on lazy proxies may warn
        for obj in objects:
            try:
                if wanted(obj):
                    return obj
            except Exception:
                continue
    return None
