"""LK304's fixes: one for each way low precision loses the signal (checks/precision_underflow.py).

- **float16 gradients flushed to 0**: dynamic loss scaling (`runtime.LossScaling`, what
  torch.amp.GradScaler does) moves them back into float16's normal range.
- **updates that round away in float16/bfloat16 weights**: a weight of 8 (bfloat16) or 11
  (float16) significant bits cannot hold an update below |w|·2^-bits, and no loss scale
  changes that: the update is divided back before the step. What holds it is a float32
  master weight: `MasterWeights` keeps the parameters float32 at the line that cast the model
  (its `.to(dtype)`, `.half()`, `.bfloat16()`) and runs that model's forward under
  torch.autocast in the dtype the script chose, so the compute stays low-precision and
  every update is added to a float32 weight (for float16, with loss scaling as well, as
  autocast float16 wants). Parameters made in low precision where they were built (no
  cast to undo) have no mechanical fix: `leaky fix` says so.
"""
from __future__ import annotations

import torch
from torch import nn

from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.remedies import Candidate, Context, remedy, short_place
from leaky.process.patch import Patch
from leaky.record.sites import SourceLocator

LOW_PRECISION = (torch.float16, torch.bfloat16)


@remedy("LK304")
def precision(finding: Finding, context: Context) -> list[Candidate]:
    candidates = []
    if "zero_share" in finding.evidence:
        candidates.append(_loss_scaling(finding))
    rounded = finding.evidence if "unchanged_share" in finding.evidence else finding.evidence.get("rounded_updates")
    if rounded:
        dtype = rounded.get("dtype")
        casts = [c for c in context.stats.casts if c.kind == "module" and c.dtype == dtype and c.source is not None]
        if casts:
            candidates.append(_master_weights(finding, casts[0].source, dtype))
        elif not candidates:
            return context.no_fix(finding, f"the parameters were made in {dtype} where they were built, with no cast "
                                           "to undo at run time: build them in float32 and run the forward under "
                                           f"torch.autocast(device_type, dtype=torch.{dtype})")
    return candidates


def _loss_scaling(finding: Finding) -> Candidate:
    return Candidate(("loss-scaling",), "dynamic loss scaling (what torch.amp.GradScaler does)", [finding],
                     [rt.LossScaling], [], [lambda: edits.snippet(
                         "scaler = torch.amp.GradScaler()\n...\nscaler.scale(loss).backward()\n"
                         "scaler.step(optimizer)\nscaler.update()")])


def _master_weights(finding: Finding, source, dtype: str) -> Candidate:
    file, line = source.file, source.line
    scaled = dtype == "float16"
    what = f"float32 master weights, {dtype} compute under torch.autocast" + (" with loss scaling" if scaled else "")
    parts = [lambda: MasterWeights(file, line, what)] + ([rt.LossScaling] if scaled else [])
    note = (f"the cast at {short_place(source)} leaves the parameters in float32 and the model's forward runs under "
            f"torch.autocast(dtype=torch.{dtype}): the same low-precision compute, each update added to a float32 "
            "weight")
    snippet = (f"# in place of the cast to {dtype} at {short_place(source)}: keep the parameters float32\n"
               f"with torch.autocast(device_type, dtype=torch.{dtype}):\n    out = model(x)\n    loss = ...\n"
               "loss.backward()\noptimizer.step()")
    return Candidate(("master-weights", file, line), what, [finding], parts, [short_place(source)],
                     [lambda: edits.snippet(snippet)], note=note)


class MasterWeights:
    """At `file:line`, a module cast to float16/bfloat16 keeps float32 parameters and buffers,
    and its forward runs under torch.autocast in the dtype it was cast to. Undone on exit."""

    def __init__(self, file: str, line: int, what: str) -> None:
        self.file, self.line, self.what = file, line, what
        self.applied: list[str] = []
        self._locator = SourceLocator()
        self._patch = Patch(nn.Module, "_apply", self._wrap)
        self._inside = False
        self._undo: list = []

    def __enter__(self) -> "MasterWeights":
        self._patch.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._patch.__exit__(*exc)
        while self._undo:
            self._undo.pop()()

    def _wrap(self, original):
        keep = self

        def _apply(module, fn, *args, **kwargs):
            # NOTE: _apply recurses into the children, each through this wrapper: only the
            # outermost call, the script's cast, is changed (its children get the kept fn).
            if keep._inside:
                return original(module, fn, *args, **kwargs)
            where = keep._locator.locate()
            if where is None or where[0] != keep.file or where[1] != keep.line:
                return original(module, fn, *args, **kwargs)
            cast: list[torch.dtype] = []

            def kept(t):
                made = fn(t)
                if t.is_floating_point() and made.dtype in LOW_PRECISION and t.dtype not in LOW_PRECISION:
                    cast.append(made.dtype)
                    return t.detach().to(made.device)
                return made
            keep._inside = True
            try:
                out = original(module, kept, *args, **kwargs)
            finally:
                keep._inside = False
            if cast:
                keep._autocast(module, cast[0])
            return out
        _apply.__wrapped__ = original
        return _apply

    def _autocast(self, module: nn.Module, dtype: torch.dtype) -> None:
        params = next(module.parameters(), None)
        device = params.device.type if params is not None else "cpu"
        prior = module.__dict__.get("forward")
        forward = module.forward

        def under_autocast(*args, **kwargs):
            with torch.autocast(device, dtype=dtype):
                return forward(*args, **kwargs)
        module.forward = under_autocast

        def undo() -> None:
            if prior is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = prior
        self._undo.append(undo)
        if not self.applied:
            self.applied.append(f"{self.what} at {self.file}:{self.line}")
