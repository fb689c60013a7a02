"""Where the data was made: the user's line that built a tensor which needs no gradient.

LK303 (unnormalized-input) is about raw features entering a layer, but the line to change
is where those features were made (`X = torch.tensor(df.values)`), not the layer they
enter. The op mode passes every call whose outputs need no gradient (data, targets, masks)
here. A tensor made from other tensors inherits their origin (`X[idx]`, `X.float()`,
`torch.stack(batch)` inside a DataLoader's collate); one made from none (from a list, a
NumPy array, a factory) gets the user's line that made it. Memory: one small entry per live
tensor made that way, dropped when the tensor is freed.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import torch
from torch import Tensor

from leaky.record.call_args import tensors_in


class Provenance:
    """id(tensor) -> the line it (or the data it came from) was made at, while it lives."""

    def __init__(self, locate: Callable[[], Any]) -> None:
        self._locate = locate
        self._made: dict[int, tuple[weakref.ref, Any]] = {}
        self._masks: dict[int, tuple[weakref.ref, Any]] = {}   # boolean masks: the line that made each

    def note(self, args: tuple, outputs: list[Tensor]) -> None:
        tensors = tensors_in(args)
        if any(t.requires_grad for t in tensors):
            return                       # a cut from the graph (LK108's business), not data
        if any(out.dtype == torch.bool for out in outputs):
            self._note_masks(tensors, outputs)
        # NOTE: what the data is made of: the first tensor (X in X[idx], X.float()) and any
        # other floating one (brightness + noise); an integer index is not data.
        sources = tensors[:1] + [t for t in tensors[1:] if t.is_floating_point()]
        origins = [self.origin_of(t) for t in sources]
        if not sources:
            where = self._locate()       # made from no tensor: a list, a NumPy array, a factory
        elif None in origins:
            # NOTE: data made before the observation began (or by calls we do not see) has no
            # known origin, and neither has what is made from it: the line of its first use
            # here would be a wrong answer to "where were the inputs built".
            return
        elif len(set(origins)) == 1:
            where = origins[0]           # the same data, indexed, cast or reshaped
        else:
            where = self._locate()       # data combined from several made here
        for out in outputs:
            if all(out is not t for t in tensors):
                self._remember(out, where)

    def _note_masks(self, tensors: list[Tensor], outputs: list[Tensor]) -> None:
        """A boolean mask is made where a comparison (or a cast) turns other values into one
        (`pad = tokens == PAD`, `torch.ones(T, T).triu(1).bool()`); one made from masks only
        (`pad[:, None, :]`, `~pad`) keeps the line of the first: the line that decides what a
        mask hides (LK107: a softmax row masked whole)."""
        made = self.mask_origin_of(tensors[0]) if tensors and all(t.dtype == torch.bool for t in tensors) else None
        where = made or self._locate()
        for out in outputs:
            if out.dtype == torch.bool and all(out is not t for t in tensors):
                self._remember(out, where, self._masks)

    def _remember(self, tensor: Tensor, where: Any, into: dict | None = None) -> None:
        if where is None:
            return
        made = self._made if into is None else into
        key = id(tensor)
        try:
            ref = weakref.ref(tensor, lambda _, key=key, made=made: made.pop(key, None))
        except TypeError:
            return
        made[key] = (ref, where)

    def mask_origin_of(self, tensor: Any) -> Any:
        """The line that made this boolean mask, if it was seen being made."""
        return self._lookup(self._masks, tensor)

    def origin_of(self, tensor: Any) -> Any:
        """The line that made this tensor's data, if it was seen being made."""
        return self._lookup(self._made, tensor)

    @staticmethod
    def _lookup(made: dict, tensor: Any) -> Any:
        if not isinstance(tensor, Tensor):
            return None
        entry = made.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return None
        return entry[1]
