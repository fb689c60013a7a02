"""The raw record of one sampled step: device values during the step, host values after.

`StepBuffer` collects a step's 0-d device values (hook norms and counts, forward checks,
the loss, parameter and update norms, carried gradients, an audit's series row) and their
layout; `flush` stacks them and copies them to the host in one
transfer and returns a `HostStep`, the typed record `derive/` folds. HostStep is the one
place that knows where each value sits.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from leaky.process import distributed


class NodeRecord(NamedTuple):
    """Host-side description of one hook call; its numbers sit in the value list (a
    NamedTuple: one is made per node per sampled step, and a tuple is the cheapest record)."""

    site: int
    seq: int            # creation order of the node: forward order, recurrence time order
    offset: int         # where its values start in the step's value list
    n_in: int           # gradients arriving
    n_act: int          # gradients sent to other nodes (activations)
    n_param: int        # gradients sent to parameters (AccumulateGrad)
    counted: bool       # whether nonzero counts were taken (elementwise node)
    numel_in: int
    half: bool = False  # low-precision counts follow: zeros and subnormals arriving
    massed: bool = False   # gradient masses follow: Σ|g| arriving, and of it, what was sent on as 0


# the columns of HostStep.table: NodeRecord's fields
SITE, SEQ, OFFSET, N_IN, N_ACT, N_PARAM, COUNTED, NUMEL_IN, HALF, MASSED = range(len(NodeRecord._fields))


class ParamNorms(NamedTuple):
    """Where a step's parameter gradient norms sit: values[offset + i] is the norm of ids[i]'s."""

    ids: list[int]      # id() of each parameter with a gradient
    offset: int


class UpdateNorms(NamedTuple):
    """Where a step's update norms sit: n = len(ids) update norms from `offset`, then n weight
    norms, then, per low-precision parameter in `low`, its (graded, unchanged) element counts."""

    ids: list[int]
    offset: int
    low: list[int]


class StepBuffer:
    """Device values of the current step plus their host-side layout."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self.values: list[Tensor] = []
        self.records: list[NodeRecord] = []
        self.forward_flags: list[tuple[int, Tensor, int]] = []   # (site, output norm, numel)
        self.bypasses: list[tuple[int, int, int]] = []        # (saturating site, composite seq, shared input seq)
        self.loss: Tensor | None = None                       # the step's first loss
        self.carried: dict[int, Tensor] = {}                  # optimizer index -> least gradient a backward started from
        self.series: list[Tensor] = []                        # an audit's series row for the step, staged (monitor)
        self.params: ParamNorms | None = None
        self.updates: UpdateNorms | None = None

    def __len__(self) -> int:
        return len(self.records) + len(self.forward_flags) + (self.loss is not None) + len(self.carried) + len(self.series)

    def flush(self) -> "HostStep":
        """The single device-to-host copy of the step."""
        flags = [flag for _, flag, _ in self.forward_flags]
        loss = [] if self.loss is None else [self.loss]
        carried = list(self.carried)
        host = _to_host(self.values + flags + loss + [self.carried[i] for i in carried] + self.series)
        at = itertools.accumulate((len(self.values), len(flags), len(loss), len(carried)))
        values_end, flags_end, loss_end, carried_end = at
        step = HostStep(host[:values_end], list(self.records), [s for s, _, _ in self.forward_flags],
                        host[values_end:flags_end], [n for _, _, n in self.forward_flags], self.bypasses,
                        loss=float(host[flags_end]) if loss else None,
                        carried=dict(zip(carried, host[loss_end:carried_end].tolist())),
                        series=host[carried_end:].tolist(), params=self.params, updates=self.updates)
        self._clear()
        return step


def _to_host(pieces: list[Tensor]) -> np.ndarray:
    """Stack 0-d values and copy them to the host: one transfer per device."""
    if not pieces:
        return np.zeros(0)
    with torch._C.DisableTorchFunction():
        pieces = distributed.materialise(pieces)   # FSDP2 norms: combined across ranks
        try:   # one device, the usual case: asked of torch.stack, not of each piece
            return _stacked(pieces)
        except RuntimeError:
            pass   # values on several devices (a model split across GPUs): one copy per device
        host = np.zeros(len(pieces))
        by_device: dict = {}
        for index, piece in enumerate(pieces):
            by_device.setdefault(piece.device, []).append(index)
        for indices in by_device.values():
            host[indices] = _stacked([pieces[i] for i in indices])
        return host


def _stacked(pieces: list[Tensor]) -> np.ndarray:
    """The values of 0-d tensors of one device, in order, as float64 on the host: one copy.

    NOTE: torch.stack of mixed dtypes (float32 norms, int64 counts, a float64 first norm)
    converts element by element, several times slower than stacking each dtype alone
    (docs/performance.md). It would also make an int64 with a
    float32 a float32 (rounded past 2**24). Each dtype is stacked on its own and widened on
    the device, the groups joined, copied once, and put back in order on the host."""
    groups: dict = {}
    for index, piece in enumerate(pieces):
        groups.setdefault(piece.dtype, []).append(index)
    if len(groups) == 1:
        return torch.stack(pieces).detach().cpu().double().numpy()
    wide = torch.float32 if pieces[0].device.type == "mps" else torch.float64   # MPS has no float64
    joined = torch.cat([torch.stack([pieces[i] for i in indices]).detach().to(wide) for indices in groups.values()])
    host = np.empty(len(pieces))
    host[np.concatenate([np.asarray(indices) for indices in groups.values()])] = joined.cpu().double().numpy()
    return host


@dataclass
class HostStep:
    """One sampled step's values on the host, and the one place that knows their layout.

    For each hook call (a NodeRecord) its values sit at `offset`: the norms of the gradients
    arriving, then of those sent to activations, then of those sent to parameters; then,
    when counted, the nonzero elements arriving and leaving; then, for a low-precision
    gradient, its exact zeros and its subnormals; then, when massed, the gradient mass
    arriving and the part of it sent on as 0."""

    values: np.ndarray
    records: list[NodeRecord]
    forward_sites: list[int]
    forward_finite: np.ndarray     # forward output norms (sums once a site's RMS is known): non-finite where an output was
    forward_numel: list[int]
    # a sigmoid/tanh in a composite with its own input (record/bypass.py): (its site, the seq of
    # the composite's node, the seq of the shared input's node), one per call
    bypasses: list[tuple[int, int, int]] = field(default_factory=list)
    loss: float | None = None      # the step's first loss (None: no scalar loss seen)
    # per optimizer (index) that stepped: the least gradient norm a backward of the step started
    # from (0: its gradients were zeroed before)
    carried: dict[int, float] = field(default_factory=dict)
    series: list[float] = field(default_factory=list)   # an audit's series values for the step (the monitor's staged row)
    params: ParamNorms | None = None    # where the parameters' gradient norms sit in `values`
    updates: UpdateNorms | None = None  # where the update and weight norms sit (an optimizer stepped)
    _finite: bool | None = field(default=None, repr=False, compare=False)
    _squares: np.ndarray | None = field(default=None, repr=False, compare=False)
    _table: np.ndarray | None = field(default=None, repr=False, compare=False)

    def arriving(self, rec: NodeRecord) -> np.ndarray:
        return self.values[rec.offset:rec.offset + rec.n_in]

    def to_params(self, rec: NodeRecord) -> np.ndarray:
        start = rec.offset + rec.n_in + rec.n_act
        return self.values[start:start + rec.n_param]

    def arriving_norms(self, seqs) -> dict[int, float]:
        """The norm of the gradient arriving at each node of `seqs` (by creation order) that has
        one output, over this step's hook calls of it (a node run twice: their squares summed)."""
        table = self.table()
        if not len(table):
            return {}
        wanted = np.isin(table[:, SEQ], np.fromiter(seqs, dtype=np.int64))
        rows = np.flatnonzero(wanted & (table[:, N_IN] == 1))
        squares = self.squared_sums()[rows, 0]
        found: dict[int, float] = {}
        for seq, square in zip(table[rows, SEQ].tolist(), squares.tolist()):
            found[seq] = found.get(seq, 0.0) + square
        return {seq: math.sqrt(square) for seq, square in found.items()}

    def leaving(self, rec: NodeRecord) -> np.ndarray:
        return self.values[rec.offset + rec.n_in:self._end(rec)]

    def nonzero_counts(self, rec: NodeRecord) -> tuple[float, float] | None:
        """(nonzero elements arriving, nonzero elements leaving), when counted."""
        if not rec.counted:
            return None
        at = self._end(rec)
        return float(self.values[at]), float(self.values[at + 1])

    def low_precision_counts(self, rec: NodeRecord) -> tuple[float, float] | None:
        """(exact zeros, subnormals) of a float16/bfloat16 gradient arriving."""
        if not rec.half:
            return None
        at = self._end(rec) + (2 if rec.counted else 0)
        return float(self.values[at]), float(self.values[at + 1])

    def zeroed_mass(self, rec: NodeRecord) -> tuple[float, float] | None:
        """(Σ|g| arriving, Σ|g| of the elements sent on as exactly 0), when massed."""
        if not rec.massed:
            return None
        at = self._end(rec) + (2 if rec.counted else 0) + (2 if rec.half else 0)
        return float(self.values[at]), float(self.values[at + 1])

    def _end(self, rec: NodeRecord) -> int:
        return rec.offset + rec.n_in + rec.n_act + rec.n_param

    @property
    def all_finite(self) -> bool:
        """Every value of the step is finite (then no node sent a NaN/Inf): one pass."""
        if self._finite is None:
            self._finite = bool(np.isfinite(self.values).all())
        return self._finite

    def table(self) -> np.ndarray:
        """The records as an int64 array, one row each, NodeRecord's fields in order."""
        if self._table is None:
            width = len(NodeRecord._fields)
            self._table = np.fromiter(itertools.chain.from_iterable(self.records), dtype=np.int64,
                                      count=width * len(self.records)).reshape(len(self.records), width)
        return self._table

    def squared_sums(self) -> np.ndarray:
        """Per record, in order (rows): the summed squares of the norms arriving, sent to
        activations and sent to parameters (0.0 where there are none), in a few numpy calls.

        NOTE: np.add.reduceat over (start, end) pairs sums each segment on its own (no running
        total whose differences would lose a small norm next to a large one); an empty
        segment gives the element at its start, so those are zeroed by their lengths."""
        if self._squares is None:
            if not self.records:
                self._squares = np.zeros((0, 3))
                return self._squares
            layout = self.table()
            offset, lengths = layout[:, OFFSET], layout[:, N_IN:N_PARAM + 1]
            ends = offset[:, None] + np.cumsum(lengths, axis=1)             # end of in, act, param
            starts = np.concatenate([offset[:, None], ends[:, :2]], axis=1)   # start of in, act, param
            pairs = np.stack([starts, ends], axis=2).reshape(-1)
            squares = np.square(np.append(self.values, 0.0))   # a start may sit at the very end
            sums = np.add.reduceat(squares, pairs)[0::2].reshape(-1, 3)
            self._squares = np.where(lengths > 0, sums, 0.0)
        return self._squares

    def all_counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For every record at once, what nonzero_counts and low_precision_counts give one at a
        time: (rows counted, their (arriving, leaving) nonzero counts; rows with low-precision
        counts, their (zeros, subnormals)), each pair an [n, 2] array."""
        layout = self.table()
        if not len(layout):
            empty = np.zeros(0, dtype=np.int64)
            return empty, np.zeros((0, 2)), empty, np.zeros((0, 2))
        end = layout[:, OFFSET] + layout[:, N_IN] + layout[:, N_ACT] + layout[:, N_PARAM]
        counted = np.flatnonzero(layout[:, COUNTED])
        half = np.flatnonzero(layout[:, HALF])
        at = end[half] + 2 * layout[half, COUNTED]
        return (counted, self.values[end[counted, None] + (0, 1)], half, self.values[at[:, None] + (0, 1)])

    def all_masses(self) -> tuple[np.ndarray, np.ndarray]:
        """For every massed record at once, what zeroed_mass gives one at a time: (rows, their
        (arriving, zeroed) masses as an [n, 2] array)."""
        layout = self.table()
        massed = np.flatnonzero(layout[:, MASSED]) if len(layout) else np.zeros(0, dtype=np.int64)
        if not len(massed):
            return massed, np.zeros((0, 2))
        rows = layout[massed]
        at = rows[:, OFFSET] + rows[:, N_IN] + rows[:, N_ACT] + rows[:, N_PARAM] + 2 * rows[:, COUNTED] + 2 * rows[:, HALF]
        return massed, self.values[at[:, None] + (0, 1)]

    @property
    def forward_bad(self) -> bool:
        """A forward output was NaN/Inf."""
        return bool(len(self.forward_finite)) and not bool(np.all(np.isfinite(self.forward_finite)))

    @property
    def loss_bad(self) -> bool:
        return self.loss is not None and not math.isfinite(self.loss)

    @property
    def backward_bad(self) -> bool:
        """A node sent a NaN/Inf gradient."""
        return not self.all_finite and any(not np.all(np.isfinite(self.leaving(rec))) for rec in self.records)
