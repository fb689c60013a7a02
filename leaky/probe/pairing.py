"""Whether the model's inputs and its targets are the same samples: LK309's place when they
are not (features and labels shuffled separately).

A data set is a tensor of N rows, one per sample, and a batch takes some of its rows. The
inputs and the targets are paired by position: row i of the features goes with row i of
the labels. `RowTrace` follows, in the real-input run up to the first optimizer step,
which rows of which data set each data tensor holds:

- a tensor made from no followed data (a factory, a list, a NumPy array) with 2 or more
  rows starts a data set, rows 0 .. N-1;
- a tensor that takes rows of one (`X[idx]`, `X[perm]`, `X[i:j]`, `X[mask]`, one row
  `X[i]`, rows stacked back into a batch by a DataLoader's collate, batches concatenated)
  holds those rows; each such selection is a step, with the line that made it;
- any other op whose output has as many rows as its first followed input (a cast, a
  normalisation, `X @ W`, `y = f(x)`) keeps that input's rows.

Which rows an op took is read from its arguments and checked against the values (row 0
and the last of the output equal the rows named), so no op is known by name. The inputs
are the first data argument of the first model call; the targets, the data that meets the
model's output outside the model (as `replay.FirstBatchReplay` records them). If no target
holds the inputs' rows (nor the same rows moved by a fixed offset, a next-token target),
the pairing was broken: at the first selection applied to one and not the other (the one
made later when both have their own: the second shuffle should have reused the first's
permutation). Reads values, changes nothing; shuffles done outside torch (NumPy, lists)
are not seen, and then nothing is said.
"""
from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass

import torch

from leaky.config import AuditConfig
from leaky.probe.calls import FirstStepCalls, _is_data, _tensors, reading

_MOST_ROWS = 10_000_000   # a data set larger than this is not followed (its row index would be large)


@dataclass(frozen=True)
class Step:
    """One selection of rows: which rows of the tensor it was applied to, where, and when."""

    order: int
    where: tuple[str, int] | None
    index: torch.Tensor                  # positions in the rows before this step


@dataclass(frozen=True)
class Rows:
    """The rows of data set `base` (of `size` rows) that a tensor holds, in order."""

    base: int
    size: int
    made: tuple[str, int] | None         # where the data set was made
    positions: torch.Tensor | None       # None: all of them, in order
    steps: tuple[Step, ...] = ()
    single: bool = False                 # one row, its dim 0 dropped (`X[i]`)

    @property
    def count(self) -> int:
        return self.size if self.positions is None else int(self.positions.numel())

    def absolute(self) -> torch.Tensor:
        return torch.arange(self.size) if self.positions is None else self.positions

    def take(self, index: torch.Tensor, order: int, where, single: bool = False) -> "Rows":
        index = index.reshape(-1).to(torch.long)
        positions = self.absolute()[index]
        return Rows(self.base, self.size, self.made, positions, self.steps + (Step(order, where, index),), single)


class RowTrace(FirstStepCalls):
    """The rows the first model call's input and the first step's targets hold (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: Rows | None = None
        self.targets: list[tuple[Rows, tuple | None]] = []   # (rows, where it met the output)
        self.done = False
        self._rows: dict[int, tuple[weakref.ref, Rows]] = {}
        self._bases = itertools.count()
        self._order = itertools.count()

    def _on_step(self, optimizer, args, kwargs) -> None:
        self.done = True
        self._rows.clear()

    # -- what the model is given, and what meets its output ---------------------------------
    def on_model(self, module, args):
        if self.done or self.inputs is not None or not torch.is_grad_enabled():
            return None
        first = next((a for a in args if _is_data(a) and a.dtype != torch.bool), None)
        if first is not None:
            self.inputs = self.rows_of(first)
        return None

    def rows_of(self, tensor) -> Rows | None:
        entry = self._rows.get(id(tensor))
        return entry[1] if entry is not None and entry[0]() is tensor else None

    def _on_call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        if self.done or self.depth or not self.live:
            return out
        try:
            with reading():
                self._note(args, kwargs, out)
        except Exception:   # it only reads: an op it cannot read is not followed (the tests raise it)
            if AuditConfig().strict:
                raise
        return out

    def _note(self, args, kwargs, out) -> None:
        flat = [t for a in (*args, *kwargs.values()) for t in _tensors(a)]
        if torch.is_grad_enabled() and any(t.requires_grad for t in flat):
            where = self._locator.locate()
            self.targets.extend((rows, where) for t in flat if _is_data(t) and t.numel() > 1
                                and (rows := self.rows_of(t)) is not None and not rows.single)
            return
        for o in _tensors(out):
            if _is_data(o) and all(o is not t for t in flat):
                rows = self._follow(o, args, kwargs)
                if rows is not None:
                    self._remember(o, rows)

    def _remember(self, tensor: torch.Tensor, rows: Rows) -> None:
        key = id(tensor)
        try:
            ref = weakref.ref(tensor, lambda _, key=key, table=self._rows: table.pop(key, None))
        except TypeError:
            return
        self._rows[key] = (ref, rows)

    # -- which rows an op's output holds ---------------------------------------------------
    def _follow(self, out: torch.Tensor, args, kwargs) -> Rows | None:
        listed = [a for a in (*args, *kwargs.values()) if isinstance(a, (list, tuple))]
        stacked = self._gathered(out, listed)
        if stacked is not None:
            return stacked
        followed = [(t, r) for a in (*args, *kwargs.values()) for t in _tensors(a)
                    if (r := self.rows_of(t)) is not None and not r.single and t.dim() >= 1]
        if not followed:
            if out.dim() >= 1 and 2 <= out.shape[0] <= _MOST_ROWS and out.dtype != torch.bool:
                return Rows(next(self._bases), int(out.shape[0]), self._where(), None)   # a new data set
            return None
        source, rows = followed[0]
        taken = _taken(out, source, args, kwargs)
        if taken is not None:
            index, single = taken
            return rows.take(index, next(self._order), self._where(), single)
        if out.dim() >= 1 and out.shape[0] == source.shape[0]:
            return rows                                                            # the same rows
        return None

    def _gathered(self, out: torch.Tensor, listed) -> Rows | None:
        """Rows put together: single rows stacked (a DataLoader's collate), or batches
        concatenated, all of one data set, as many as the output has."""
        for items in listed:
            found = [self.rows_of(t) if isinstance(t, torch.Tensor) else None for t in items]
            if not found or any(r is None for r in found) or len({r.base for r in found}) != 1 or out.dim() == 0:
                continue
            if all(r.single for r in found) and out.shape[0] == len(found):
                positions = torch.cat([r.absolute() for r in found])
            elif not any(r.single for r in found) and out.shape[0] == sum(r.count for r in found):
                positions = torch.cat([r.absolute() for r in found])
            else:
                continue
            first = found[0]
            step = Step(next(self._order), self._where(), positions)
            return Rows(first.base, first.size, first.made, positions, (step,))
        return None

    def _where(self):
        where = self._locator.locate()
        return (where[0], where[1]) if where is not None else None

    # -- the verdict -----------------------------------------------------------------------
    def mispaired(self) -> dict | None:
        """Where the inputs and the targets stopped being the same samples; None when they
        are, or when that cannot be told (an input or targets not followed)."""
        x = self.inputs
        if x is None:
            return None
        comparable = [(t, where) for t, where in self.targets
                      if (t.base == x.base or t.size == x.size) and t.count == x.count]
        if not comparable:
            return None
        xs = x.absolute()
        if any(_aligned(xs, t.absolute()) for t, _ in comparable):
            return None
        target, met = comparable[0]
        own_x = [s for s in x.steps if not any(_same(s, o) for o in target.steps)]
        own_t = [s for s in target.steps if not any(_same(s, o) for o in x.steps)]
        if not own_x and not own_t:
            return None
        blamed = max(own_x[:1] + own_t[:1], key=lambda s: s.order)
        side = "the inputs" if own_x and blamed is own_x[0] else "the targets"
        other = (own_t[:1] if side == "the inputs" else own_x[:1])
        return {"file": blamed.where[0] if blamed.where else None, "line": blamed.where[1] if blamed.where else None,
                "side": side, "other": None if not other or other[0].where is None else
                {"file": other[0].where[0], "line": other[0].where[1]},
                "inputs": _shown(xs), "targets": _shown(target.absolute()),
                "met": None if met is None else {"file": met[0], "line": met[1]}}


def _taken(out: torch.Tensor, source: torch.Tensor, args, kwargs) -> tuple[torch.Tensor, bool] | None:
    """(the rows of `source` that `out` holds, whether it is one row with dim 0 dropped),
    when `out` is a selection of its rows; None otherwise. Read from the arguments, then
    checked against the values."""
    n = source.shape[0]
    if n == 0:
        return None
    if _shares(out, source) and source.stride(0) > 0:
        start, rem = divmod(out.storage_offset() - source.storage_offset(), source.stride(0))
        if rem == 0 and 0 <= start < n:
            if out.dim() == source.dim() - 1 and tuple(out.shape) == tuple(source.shape[1:]) \
                    and tuple(out.stride()) == tuple(source.stride()[1:]):
                return torch.tensor([start]), True                              # X[i]
            if (out.dim() == source.dim() and tuple(out.shape[1:]) == tuple(source.shape[1:]) and out.shape[0]
                    and tuple(out.stride()[1:]) == tuple(source.stride()[1:])
                    and out.stride(0) % source.stride(0) == 0 and out.stride(0) > 0):
                step = out.stride(0) // source.stride(0)
                index = torch.arange(start, start + step * out.shape[0], step)
                if index[-1] < n and not (start == 0 and step == 1 and out.shape[0] == n):
                    return index, False                                         # X[i:j], X[::2]
                return None
    for candidate in _indices(args, kwargs, source):
        index = candidate
        if index.dtype == torch.bool:
            if index.dim() != 1 or index.shape[0] != n:
                continue
            index = index.nonzero().reshape(-1)
        index = index.reshape(-1).to(torch.long)
        if out.dim() < 1 or out.shape[0] != index.numel() or tuple(out.shape[1:]) != tuple(source.shape[1:]) \
                or not index.numel() or int(index.min()) < -n or int(index.max()) >= n:
            continue
        index = index % n
        if _holds(out, source, index):
            return index, False                                                 # X[idx], X[mask]
    return None


def _holds(out: torch.Tensor, source: torch.Tensor, index: torch.Tensor, most: int = 1 << 22) -> bool:
    """Whether `out` is `source`'s rows `index`, by their values: all of them, or 64 rows
    spread over a large output. (An integer argument of an elementwise op, `a + b`, can have
    the right length and range and still be no index.)"""
    if out.device != source.device or out.dtype != source.dtype:
        return False
    rows = index.to(source.device)
    if out.numel() > most:
        picked = torch.linspace(0, index.numel() - 1, 64).long().unique().to(source.device)
        return torch.equal(out[picked], source[rows[picked]])
    return torch.equal(out, source[rows])


def _indices(args, kwargs, source):
    """Integer or boolean tensors (or NumPy arrays) among the arguments, other than `source`."""
    for value in (*args, *kwargs.values()):
        for item in (value if isinstance(value, (list, tuple)) else (value,)):
            if item is source:
                continue
            if isinstance(item, torch.Tensor) and item.dim() == 1 and not item.is_floating_point() \
                    and not item.is_complex():
                yield item.detach().cpu()
            elif type(item).__module__ == "numpy" and getattr(item, "ndim", 0) == 1 \
                    and getattr(item, "dtype", None) is not None and item.dtype.kind in "iub":
                yield torch.as_tensor(item)


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.device == b.device
    except (RuntimeError, NotImplementedError):
        return False


def _aligned(x: torch.Tensor, t: torch.Tensor) -> bool:
    """The same rows, or the same rows moved by one fixed offset (a next-token target)."""
    if x.numel() != t.numel():
        return False
    if torch.equal(x, t):
        return True
    shift = t - x
    return bool((shift == shift[0]).all()) and abs(int(shift[0])) <= max(1, x.numel() // 2) and x.numel() > 1 \
        and bool((x[1:] - x[:-1] == 1).all())


def _same(a: Step, b: Step) -> bool:
    return a.index.numel() == b.index.numel() and torch.equal(a.index, b.index)


def _shown(positions: torch.Tensor, most: int = 5) -> str:
    values = positions.tolist()
    return ", ".join(str(v) for v in values[:most]) + (", ..." if len(values) > most else "")
