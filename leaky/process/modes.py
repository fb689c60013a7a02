"""CallMode: leaky's one shape of torch-function mode outside the recorder.

A mode that hands every torch call to `on_call(func, args, kwargs)`, which runs it (or
something in its place) and returns what the caller gets. `leaky fix`'s op replaced at one
line (fix/runtime.py OpAtLine), `leaky probe`'s model calls (probe/calls.py) and LK306's
capture of a model's ops (record/batch_mixing.py) are each one `on_call`. The recorder's own
OpMode (record/opmode.py) stays apart: it is guarded against tracing and observes every op
of the program. A leaf.
"""
from __future__ import annotations

from typing import Any, Callable

from torch.overrides import TorchFunctionMode


class CallMode(TorchFunctionMode):
    def __init__(self, on_call: Callable[[Any, tuple, dict], Any]) -> None:
        super().__init__()
        self.on_call = on_call

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.on_call(func, args, kwargs or {})
