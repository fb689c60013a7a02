"""Where the gradient path is cut: a `.detach()`, `.data`, `.numpy()`, a no_grad block, an
op without a derivative, backward() on a leaf, a leaf rebuilt from cut values; and where the
script initialises a parameter in place (a write outside any forward).

`CutRecords` is told by OpMode (and, for a leaf loss, by the step clock) and keeps one
CutEvent per (kind, producers, line, module): the modules that produced the cut tensor,
and what stands behind it (record/cut_paths.py), read once, when the cut is first seen.
"""
from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor, nn

from leaky import ops
from leaky.record.call_args import parameters_in
from leaky.record.cut_paths import graph_behind, producer_sites
from leaky.record.leaves import MadeLeaf
from leaky.stats import CutEvent


class CutHost(Protocol):
    """What CutRecords asks of the recorder."""

    locator: Any        # SourceLocator: the user's line now
    modules: Any        # ModuleTracker: the module running now, and who produced a parameter
    params: Any         # ParamTable: a parameter's module
    sites: Any          # SiteTable: a site's module
    leaves: Any         # MadeLeaves: the leaves the script builds
    step: int

    def site_of(self, node: Any) -> int | None: ...


class CutRecords:
    def __init__(self, host: CutHost) -> None:
        self.host = host
        self.cuts: dict[tuple, CutEvent] = {}
        self.init_sites: dict[int, tuple] = {}   # id(param) -> where user code last wrote it in place

    def note_cut(self, kind: str, args: tuple) -> None:
        if not args or not isinstance(args[0], Tensor) or not args[0].requires_grad:
            return
        if not torch.is_grad_enabled() and kind == ops.calls.DETACH:
            return
        self._add(kind, self._producer_modules(args[0]), args[0])

    def note_no_grad(self, op: str, args: tuple) -> None:
        params = parameters_in(args)
        if not any(p.requires_grad for p in params):
            return
        current = self.host.modules.current
        if op in ops.calls.INIT_WRITES and current is None and args and isinstance(args[0], nn.Parameter):
            self.note_init(args)
            return
        self._add(ops.calls.NO_GRAD, (current,))

    def note_init(self, args: tuple) -> None:
        """An in-place write to a parameter outside any forward: its initialisation."""
        if args and isinstance(args[0], nn.Parameter) and self.host.modules.current is None:
            self.init_sites[id(args[0])] = self.host.locator.locate()

    def note_dropped_grad(self, op: str, args: tuple) -> None:
        """An op gave a tensor without gradient from inputs that had one (a comparison, an
        argmax, a cast to an integer dtype): the path to the loss is cut there."""
        inputs = [a for a in args if isinstance(a, Tensor) and a.requires_grad]
        if inputs:
            self._add(f"{ops.calls.NONDIFF}:{op}", self._producer_modules(inputs[0]), inputs[0])

    def note_leaf_loss(self, tensor: Tensor) -> None:
        """backward() on a tensor that is a leaf: nothing before it can get a gradient
        (typically `loss.requires_grad = True` after the graph was cut)."""
        self._add(ops.calls.LEAF, ())

    def note_made_leaf(self, tensor: Tensor) -> None:
        """The script built a new leaf that requires grad (torch.tensor(..., requires_grad=True),
        .requires_grad_()); the modules behind the cuts on the same line are what it rebuilds."""
        if isinstance(tensor, nn.Parameter) or not tensor.is_leaf:
            return
        host = self.host
        where = host.locator.locate()
        if where is None:
            return
        producers = tuple(dict.fromkeys(p for c in self.cuts.values() if c.where is not None
                                        and c.where[:2] == where[:2] for p in c.producer))
        host.leaves.note(tensor, where, host.modules.current, host.step, producers)

    def leaf_reached(self, leaf: MadeLeaf) -> None:
        """A leaf the script rebuilt that a loss reached and no optimizer trains: a cut."""
        kind = f"{ops.calls.REBUILT}:{'prediction' if leaf.prediction else 'inputs'}"
        key = (kind, leaf.producers, leaf.where, leaf.module)
        self.cuts.setdefault(key, CutEvent(kind, leaf.producers, leaf.module, leaf.where, leaf.step))

    def _producer_modules(self, tensor: Tensor) -> tuple[int | str | None, ...]:
        """The modules whose ops produced this tensor, nearest first, through its ancestry."""
        host = self.host
        if isinstance(tensor, nn.Parameter):
            return (host.modules.producer_of(host.params.module_of(tensor), tensor),)
        sites = producer_sites(tensor, host.site_of)
        return tuple(dict.fromkeys(host.sites.sites[site].module_key for site in sites))

    def _add(self, kind: str, producers: tuple, tensor: Tensor | None = None) -> None:
        host = self.host
        where = host.locator.locate()
        current = host.modules.current
        key = (kind, producers, where, current)
        if key not in self.cuts:
            behind = (None, None, None) if tensor is None else graph_behind(
                tensor, host.site_of, lambda p: host.modules.producer_of(host.params.module_of(p), p))
            self.cuts[key] = CutEvent(kind, producers, current, where, host.step, *behind)
