"""What a torch call hands leaky: its op's name, the tensors of its arguments or output,
the parameters among its arguments. Read by every instrument that sees calls; a leaf of
record/.
"""
from __future__ import annotations

from typing import Any

from torch import Tensor, nn


def op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or str(func)
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2].lstrip("ir") if name[2:-2] in _REFLECTED else name[2:-2]
    return name


_REFLECTED = {"radd", "rsub", "rmul", "rtruediv", "rmatmul", "rpow", "iadd", "isub", "imul", "itruediv"}


def tensors_in(out: Any) -> list[Tensor]:
    """The tensors of an output or an argument tuple, one level of nesting deep."""
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        found = []
        for item in out:
            if isinstance(item, Tensor):
                found.append(item)
            elif isinstance(item, (tuple, list)):
                found.extend(t for t in item if isinstance(t, Tensor))
        return found
    return []


def parameters_in(args: tuple) -> list[nn.Parameter]:
    found = []
    for a in args:
        if isinstance(a, nn.Parameter):
            found.append(a)
        elif isinstance(a, (tuple, list)):
            found.extend(p for p in a if isinstance(p, nn.Parameter))
    return found
