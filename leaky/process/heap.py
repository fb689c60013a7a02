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
import sys
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
        """Whether an optimizer alive now holds one of these parameters (by id): first among
        the variables of the frames that called in (the training loop's `optimizer`, a
        trainer's `self.opt`), else in the whole heap.

        NOTE: the heap is picked over by exact type in one comprehension (a set lookup per
        object), not by a Python call per object: this runs at the first backward of a
        script whose optimizer was made before leaky started, and a call per object of a
        few hundred thousand cost ~50-100 ms of that first step (docs/performance.md)."""
        kinds = _subclasses(torch.optim.Optimizer)

        def over(obj) -> bool:
            return any(id(p) in param_ids for group in obj.param_groups for p in group["params"])
        if _first(_in_frames(kinds), over) is not None:
            return True
        optimizers = [obj for obj in self.live_objects() if type(obj) in kinds]
        return _first(optimizers, over) is not None


def _in_frames(kinds: set[type], depth: int = 64) -> list:
    """The optimizers among the callers' local and global variables and their attributes
    (one level: `self.optimizer`), nearest frame first.

    NOTE: a scan of a few hundred names instead of the heap's hundreds of thousands of
    objects (~100 ms); whether an optimizer exists is only answered "no" by the heap."""
    found, seen = [], set()
    frame = sys._getframe(1)
    while frame is not None and depth:
        for names in (frame.f_locals, frame.f_globals):
            for value in list(names.values()):
                for obj in (value, *_attributes(value)):
                    if type(obj) in kinds and id(obj) not in seen:
                        seen.add(id(obj))
                        found.append(obj)
        frame, depth = frame.f_back, depth - 1
    return found


def _attributes(value) -> list:
    attributes = getattr(value, "__dict__", None) if not isinstance(value, type) else None
    return list(attributes.values()) if isinstance(attributes, dict) else []


def _subclasses(kind: type) -> set[type]:
    """`kind` and every class derived from it, at any depth."""
    found, todo = {kind}, [kind]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


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
