"""The guard every callback leaky hands to torch goes through: it keeps leaky out of
compiled graphs (record/compiled.py says why). While Dynamo traces, a guarded callback is a
pass-through; called while compiled code runs, it runs with Dynamo off; otherwise it costs
one flag read. A leaf of record/: it imports nothing of leaky's.
"""
from __future__ import annotations

import functools
import sys
from typing import Callable

import torch

try:
    from torch._C._dynamo.eval_frame import get_eval_frame_callback as _eval_frame_callback
except ImportError:   # a torch without Dynamo
    def _eval_frame_callback():
        return None

def _nothing(*args, **kwargs) -> None:
    return None


def _dynamo_running() -> bool:
    """Whether a compiled call is in progress on this thread (Dynamo's frame callback is set)."""
    callback = _eval_frame_callback()
    return callback is not None and callback is not False


# NOTE: set once this process has compiled code: torch.compile called, a compiled module
# called, or frames that Dynamo compiled before the audit. Until then nothing can be traced
# and a callback costs one list read, not two flag calls (torch.optim alone loads Dynamo).
_COMPILED_SEEN = [False]


def note_compiled() -> None:
    _COMPILED_SEEN[0] = True


def frames_compiled_already() -> bool:
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)
    try:
        return bool(counters and counters["frames"]["total"])
    except Exception:
        return True   # cannot tell: keep every callback checked


def outside_graphs(fn: Callable, traced: Callable = _nothing) -> Callable:
    """`fn`, kept out of Dynamo: while Dynamo traces, the call is `traced(*args)` instead (a
    pass-through of what `fn` observes); called while compiled code runs, `fn` runs with
    Dynamo off. Otherwise `fn` itself, at the cost of one flag read."""
    without_dynamo: list = []
    seen = _COMPILED_SEEN

    def entry(*args, **kwargs):
        if not seen[0]:
            return fn(*args, **kwargs)
        if torch.compiler.is_compiling():
            return traced(*args, **kwargs)
        if _dynamo_running():
            if not without_dynamo:
                without_dynamo.append(torch.compiler.disable(fn, recursive=True))
            return without_dynamo[0](*args, **kwargs)
        return fn(*args, **kwargs)

    return functools.wraps(fn)(entry)


_ENTRY_CODE = outside_graphs(_nothing).__code__


def keep_dynamo_off_entries() -> None:
    """Dynamo compiles any frame it meets while a compiled call runs. `entry` must be
    inlined when traced (then it is a pass-through) but never compiled as a frame of its
    own (it would compile the pass-through and skip leaky): mark its code, once."""
    from torch._dynamo.eval_frame import skip_code
    skip_code(_ENTRY_CODE)
