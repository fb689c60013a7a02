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

from torch import Tensor


def _first_tensor(args: tuple) -> Tensor | None:
    for arg in args:
        if isinstance(arg, Tensor):
            return arg
        if isinstance(arg, (tuple, list)):
            for item in arg:
                if isinstance(item, Tensor):
                    return item
    return None


class Provenance:
    """id(tensor) -> the line it (or the data it came from) was made at, while it lives."""

    def __init__(self, locate: Callable[[], Any]) -> None:
        self._locate = locate
        self._made: dict[int, tuple[weakref.ref, Any]] = {}

    def note(self, args: tuple, outputs: list[Tensor]) -> None:
        source = _first_tensor(args)
        if source is not None and source.requires_grad:
            return                       # a cut from the graph (LK108's business), not data
        # NOTE: data made before the observation began (or by calls we do not see) has no
        # known origin, and neither has what is made from it: the line of its first use here
        # would be a wrong answer to "where were the inputs built".
        where = self._locate() if source is None else self.origin_of(source)
        if where is None:
            return
        for out in outputs:
            if out is not source:
                self._remember(out, where)

    def _remember(self, tensor: Tensor, where: Any) -> None:
        if where is None:
            return
        key = id(tensor)
        try:
            ref = weakref.ref(tensor, lambda _, key=key, made=self._made: made.pop(key, None))
        except TypeError:
            return
        self._made[key] = (ref, where)

    def origin_of(self, tensor: Any) -> Any:
        """The line that made this tensor's data, if it was seen being made."""
        if not isinstance(tensor, Tensor):
            return None
        entry = self._made.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return None
        return entry[1]
