"""The forward-side instrument: a TorchFunctionMode that sees every torch call.

For each call that creates autograd nodes it names the site (module, op, source line),
hooks the new nodes for the backward pass, flags non-finite outputs, updates activation
statistics, and notes where a gradient path is cut (detach, .data, no_grad). It returns
the op's own output untouched, so training is unchanged.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from leaky import ops
from leaky.record.call_args import op_name, tensors_in
from leaky.process.guards import outside_graphs

if TYPE_CHECKING:
    from leaky.record.roles import OpHost

# calls that only read metadata, and attribute writes (`p.grad = None` in every zero_grad:
# its output is None, nothing to observe): passed straight through
_PASS = ops.calls.METADATA | {"__set__"}
_CUTS = ops.calls.CUTS           # calls that leave the graph, and the kind of cut
_NN_INIT = ops.calls.NN_INIT
_LEAF_MAKERS = ops.calls.LEAF_MAKERS   # calls that can build a new leaf that requires grad
_DATA = torch.Tensor.data   # `.data` reaches us as this descriptor's (freshly bound) __get__


def _call_through(mode, func, types, args=(), kwargs=None):
    return func(*args, **(kwargs or {}))


class OpMode(TorchFunctionMode):
    """Forwards every call unchanged; reports what it saw to the recorder."""

    def __init__(self, recorder: "OpHost") -> None:
        super().__init__()
        self.recorder = recorder

    def _observe(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rec = self.recorder
        if not rec.observing:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name == "__get__" and getattr(func, "__self__", None) is _DATA:
            rec.guarded(rec.cut_records.note_cut, ops.calls.DATA, args)
            return func(*args, **kwargs)
        if name in _PASS:
            return func(*args, **kwargs)
        if name in _CUTS:
            rec.guarded(rec.cut_records.note_cut, _CUTS[name], args)
            return func(*args, **kwargs)
        if name in _NN_INIT and torch.is_grad_enabled():
            # nn.init.* enters here (with keyword arguments) before its own no_grad
            rec.guarded(rec.cut_records.note_init, args or tuple(kwargs.values()))
        try:
            out = func(*args, **kwargs)
        except Exception as exc:
            if ops.loss_expects(name) is not None:
                rec.guarded(rec.note_loss_failure, name, args, kwargs, exc)
            raise
        try:
            if name in _LEAF_MAKERS and isinstance(out, Tensor) and out.requires_grad and out.grad_fn is None:
                rec.cut_records.note_made_leaf(out)
            if not torch.is_grad_enabled():
                rec.cut_records.note_no_grad(name, args)
                return out
            outputs = [out] if isinstance(out, Tensor) else tensors_in(out)
            if outputs:
                if outputs[0].grad_fn is None and not outputs[0].requires_grad:
                    rec.cut_records.note_dropped_grad(op_name(func), args)
                    rec.provenance.note(args, outputs)
                else:
                    rec.on_op(op_name(func), args, kwargs, outputs)
        except Exception as exc:  # leaky's own failure: the user's op already ran
            rec.fail(exc)
        return out

    __torch_function__ = outside_graphs(_observe, traced=_call_through)
