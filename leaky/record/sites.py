"""Sites: a place in the user's program where an op runs, stable across steps.

A site is (module, op, autograd node, source file, source line). The same `torch.tanh` in a
loop over time steps is one site with many occurrences per step, which is how leaky sees a
hand-written recurrence.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from leaky import ops
from leaky.process.frames import is_internal


class SourceLocator:
    """Finds the first frame outside torch and leaky. Caches the verdict per code object."""

    def __init__(self) -> None:
        self._internal: dict[Any, bool] = {}

    def locate(self, made: Any = None, start: Any = None) -> tuple[str, int, int] | None:
        """(file, line, instruction offset): the offset tells apart two calls on one line,
        such as the two matmuls of `h = tanh(x @ W_ih + h @ W_hh)`. With `made`, where it was
        constructed: the first user frame that is not one of its own `__init__`s (`Net()`,
        not the `super().__init__()` inside `Net.__init__`). With `start`, the walk begins at
        that frame (a patched call's caller: each frame object the walk reaches is made on
        demand, 1-2 µs apiece, and leaky's own frames below it need none)."""
        frame = sys._getframe(1) if start is None else start
        internal = self._internal
        while frame is not None:
            code = frame.f_code
            verdict = internal.get(code)
            if verdict is None:
                verdict = internal[code] = is_internal(code.co_filename)
            if not verdict and (made is None or not _constructing(frame, made)):
                return code.co_filename, frame.f_lineno, frame.f_lasti
            frame = frame.f_back
        return None


def _constructing(frame, made: Any) -> bool:
    code = frame.f_code
    return (code.co_name == "__init__" and code.co_argcount > 0
            and frame.f_locals.get(code.co_varnames[0]) is made)


@dataclass
class Site:
    """A recorded place: what ran, inside which module, from which line."""

    index: int
    op: str                      # the torch function the user called, e.g. "clamp"
    node: str                    # the autograd node class, e.g. "ClampBackward1"
    module_key: int | None       # index into the module table, None outside any module
    file: str | None
    line: int | None
    first_seq: int               # creation order of its first node: forward order
    detail: dict[str, Any] = field(default_factory=dict)
    loss_path: bool = False      # reached from a loss with no layer between (record/loss_path.py)
    # the site recorded just before it in the forward of the step where it first ran (None:
    # the first of that step): places a site first seen at a later step (a dropout that runs
    # once the model is back in train()) in the forward order, where first_seq cannot
    after: int | None = None


class SiteTable:
    """Interns sites so per-step records carry one small integer."""

    def __init__(self) -> None:
        self.sites: list[Site] = []
        self._index: dict[tuple, int] = {}
        self.last: int | None = None   # the site of the step's last recorded op (Site.after); None at a step's start

    def find(self, op: str, node: str, module_key: int | None, where: tuple[str, int] | None) -> int | None:
        """The site already interned for this op, node, module and place, if any."""
        return self._index.get((op, node, module_key, where))

    def intern(self, op: str, node: str, module_key: int | None, where: tuple[str, int] | None,
               seq: int, detail: dict[str, Any] | None = None) -> int:
        key = (op, node, module_key, where)
        index = self._index.get(key)
        if index is None:
            index = len(self.sites)
            file, line = (where[0], where[1]) if where is not None else (None, None)
            self.sites.append(Site(index, op, node, module_key, file, line, seq, dict(detail or {}), after=self.last))
            self._index[key] = index
        return index


@dataclass(frozen=True)
class DetailContext:
    """What call_detail may ask the recorder: the site an autograd node was filed under, and
    the line that made a boolean mask (record/provenance.py)."""

    site_of: Any          # node -> site index | None
    mask_origin: Any      # tensor -> (file, line) | None


def call_detail(op: str, args: tuple, kwargs: dict, context: DetailContext | None = None) -> dict[str, Any] | None:
    """What of the call a check needs later: a softmax's dim (and the masked_fill site that
    filled its scores), a clamp's bounds, what fed a log, a masked_fill's value and where its
    mask was made."""
    rule = ops.rule(op)
    kind = None if rule is None else rule.detail
    if kind == ops.SOFTMAX_DIM and args and isinstance(args[0], Tensor):
        at = rule.extra.get("dim_at", 1)   # gumbel_softmax(logits, tau, hard, eps, dim)
        dim = kwargs.get("dim", args[at] if len(args) > at else rule.extra.get("dim_default"))
        x = args[0]
        if dim is None:
            dim = 0 if x.ndim in (0, 1, 3) else 1   # torch's legacy implicit dim
        detail = {"dim": int(dim), "dim_size": int(x.shape[dim]) if x.ndim else 1}
        filled = _fill_site(x.grad_fn, context)
        return detail if filled is None else {**detail, "filled_by": filled}
    if kind == ops.FILL:
        return _fill_detail(rule, args, kwargs, context)
    if kind == ops.LOG_INPUT and args and isinstance(args[0], Tensor) and args[0].grad_fn is not None:
        return {"input_node": type(args[0].grad_fn).__name__}
    if kind == ops.BOUNDS:
        low, high = rule.bounds(args, kwargs)
        return {"low": low, "high": high}
    return None


def _fill_detail(rule, args: tuple, kwargs: dict, context: DetailContext | None) -> dict[str, Any]:
    """A masked_fill's value (a float; None when it is no single number) and the line that made
    its mask."""
    at, value_at = rule.extra["mask_at"], rule.extra["value_at"]
    mask = args[at] if len(args) > at else kwargs.get("mask")
    value = args[value_at] if len(args) > value_at else kwargs.get("value")
    if isinstance(value, Tensor):
        value = float(value) if value.numel() == 1 else None   # once per site: a 0-d value on the host
    where = context.mask_origin(mask) if context is not None else None
    where = (where[0], where[1]) if where else None   # (file, line)
    if value is not None:
        value = float(value)
        value = value if math.isfinite(value) else str(value)   # "-inf": JSON has no infinity
    return {"fill": value, "mask_at": where}


def _fill_site(node, context: DetailContext | None, depth: int = 4) -> int | None:
    """The site of the masked_fill that filled a softmax's input, through views and copies
    (ops.passes_gradient); None when there is none."""
    while context is not None and node is not None and depth > 0:
        rule = ops.node_rule(type(node).__name__)
        if rule is not None and rule.detail == ops.FILL:
            return context.site_of(node)
        if not ops.passes_gradient(type(node).__name__):
            return None
        inputs = [fn for fn, _ in node.next_functions if fn is not None]
        node, depth = (inputs[0] if len(inputs) == 1 else None), depth - 1
    return None


def scores_site(node, context: DetailContext, depth: int = 4) -> int | None:
    """The site of the op that computed a softmax's scores: the first hooked node behind its
    input that is not a view, a transpose or a mask (ops.keeps_scores)."""
    for _ in range(depth):
        if node is None:
            return None
        site = context.site_of(node)
        if site is not None and not ops.keeps_scores(node):
            return site
        node = next((fn for fn, _ in node.next_functions if fn is not None), None)
    return None
