"""Whether the first step's targets were computed from a model: what LK309's zeros also change.

LK309 trains once on the real inputs and once with every model input replaced by zeros, and
compares their losses. That comparison measures the input only while the targets stay what
they are. Where the targets are computed from a model's outputs (a TD target from a target
network, returns bootstrapped from a critic, advantages, the actions a policy sampled, a
teacher's soft labels, pseudo-labels), the zeros change the targets too: a model fed zeros
that fits its own constant targets as well as the real one fits the real targets says nothing
about the input.

`TargetOrigins` follows, in the real-input run up to the first optimizer step, which tensors
were computed from a model's output:

- every output of a model call (a module with parameters called from outside any other), made
  with grad or under no_grad;
- whatever an op makes from one of them (`value.flatten()`, `.max(1)`, `.detach()`, a sample
  drawn from a policy's probabilities, `returns = advantages + values`), and a tensor an op
  writes one of them into (`values[t] = value`: any op that bumps its first argument's version).

`found` is the first data tensor (no grad) computed from a model that meets a tensor with grad
outside every model, with grad enabled: a target. Reads values' identities, changes nothing.
Values that leave torch (`.item()`, NumPy) are not followed.
"""
from __future__ import annotations

import weakref

import torch

from leaky.probe.calls import FirstStepCalls, _is_data, _tensors, reading

_PRUNE = 4096   # forget the tensors that died when the table has grown by this many


class TargetOrigins(FirstStepCalls):
    """Which tensors a model's outputs made, and the first that is a target (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.done = False                    # the first optimizer step was taken
        # {"file", "line"}: where the target was made; "model", "called_at" {"file", "line"}: the
        # model call it came from; "met" {"op", "file", "line"}: where it met the model's output
        self.found: dict | None = None
        self._made: dict[int, tuple[weakref.ref, dict]] = {}   # id -> (tensor, the model call it came from)
        self._size = 0

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        self._made.clear()

    def _on_step(self, optimizer, args, kwargs) -> None:
        self.done = True
        self._made.clear()

    def after_model(self, module, args, kwargs, output) -> None:
        if self.done or not self.live:
            return
        where = self._locator.locate()
        origin = {"model": type(module).__name__,
                  "called_at": {"file": where[0], "line": where[1]} if where else None}
        outs = [t for v in output.values() for t in _tensors(v)] if isinstance(output, dict) else _tensors(output)
        for t in outs:
            self._mark(t, origin)

    def _origin(self, t: torch.Tensor) -> dict | None:
        known = self._made.get(id(t))
        return known[1] if known is not None and known[0]() is t else None

    def _mark(self, t: torch.Tensor, origin: dict) -> None:
        self._made[id(t)] = (weakref.ref(t), origin)
        if len(self._made) > self._size + _PRUNE:
            self._made = {k: v for k, v in self._made.items() if v[0]() is not None}
            self._size = len(self._made)

    def _on_call(self, func, args, kwargs):
        if self.done or self.depth or not self.live:
            return func(*args, **kwargs)
        given = [t for a in (*args, *kwargs.values()) for t in _tensors(a)]
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        version = first._version if first is not None else None
        out = func(*args, **kwargs)
        with reading():
            self._read(func, given, first, version, out)
        return out

    def _read(self, func, given, first, version, out) -> None:
        origin = next((o for o in map(self._origin, given) if o is not None), None)
        if origin is None:
            return
        if self.found is None and torch.is_grad_enabled() and any(t.requires_grad for t in given):
            target = next((t for t in given if _is_data(t) and self._origin(t) is not None), None)
            if target is not None:
                self._found(func, self._made_at(target), self._origin(target))
        made = self._locator.locate()
        origin = {**origin, "made": {"file": made[0], "line": made[1]} if made else None}
        for t in _tensors(out):
            self._mark(t, origin)
        if first is not None and first._version != version:   # written in place: values[t] = value
            self._mark(first, origin)

    def _made_at(self, target: torch.Tensor) -> dict | None:
        """Where the target was made: the op that made it, or the model call that returned it."""
        origin = self._origin(target)
        return origin.get("made") or origin.get("called_at")

    def _found(self, func, made: dict | None, origin: dict) -> None:
        met = self._locator.locate()
        self.found = {"file": made["file"] if made else None, "line": made["line"] if made else None,
                      "model": origin["model"], "called_at": origin["called_at"],
                      "met": {"op": getattr(func, "__name__", str(func)).strip("_"),
                              "file": met[0] if met else None, "line": met[1] if met else None}}
