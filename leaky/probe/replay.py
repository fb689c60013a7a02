"""What the probes change in a running program, without editing its files: its batches.

Three run-time parts, each a context manager entered like a `leaky fix` fix (see
`leaky/fix/runtime.py`) and removed on exit:

- `FirstBatchReplay` (LK308): the first optimizer step's batch, and only it, at every step.
  It records, during the first step, every tensor the program feeds its model (the
  positional arguments of each call of a model, a module with parameters called from
  outside any other) and every tensor that meets the model's outputs outside the model
  (the targets: the `y` of `cross_entropy(out, y)` or of `out - y`, wherever it is
  preprocessed, a TD target or a return computed from a model under no_grad). The batch is
  what fed the first step's backward: a call whose output did not (a DQN acting on one
  state with grad enabled) is not part of it and is left alone at every step. A call is
  known by its model, the user's lines that led to it, and its count among those. At every
  later step the batch's calls get the recorded values. A tensor fed at a place of the
  batch the first step did not feed is counted in `unmatched`, and a model fed keyword
  tensors in `keyword_inputs`: then the replay is not complete and the probe says it
  could not run.
- `ZeroInputs` (LK309): each model call's first tensor argument replaced by zeros.
- `InputTrace` (LK309): in the first model call, where the input's information is lost:
  the first op whose output is the same for every sample although its input differed,
  or that the input never reaches the output at all. Reads values, changes nothing.

A data tensor is one that does not require grad and is not a parameter; only ops run with
grad enabled, outside every model, are looked at for targets (an optimizer's update runs
under no_grad; a BatchNorm's running statistics are inside its model).
"""
from __future__ import annotations

import inspect
import os
import weakref

import torch
from torch import nn
from torch.nn.modules import module as module_globals

from leaky import ops
from leaky.config import AuditConfig
from leaky.process.frames import is_internal
from leaky.process.modes import CallMode
from leaky.probe.calls import (FirstStepCalls, ModelCalls, _call_path, _is_data, _on_backward, _tensors,
                               reading)
from leaky.probe.floor import LossTerms
from leaky.record.sites import SourceLocator

_BACKWARD = "backward"   # Tensor.backward, as a torch-function mode sees it (leaky's patch keeps the name)

# Ops that take only their input's shape, not its values: their constant output loses nothing.
_SHAPE_ONLY = {"zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones", "new_empty",
               "new_full", "new_tensor", "size", "dim", "numel"}


class FirstBatchReplay(FirstStepCalls):
    """The first optimizer step's batch, replayed at every later step (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.step = 0                       # lead optimizer steps done
        self.inputs: dict[tuple, dict[int, torch.Tensor]] = {}   # model call -> {arg index: value}
        self.targets: dict[tuple, torch.Tensor] = {}             # (site, call, arg) -> value
        self.terms = LossTerms()            # the loss calls of each step and their weights (LK308's floor)
        self.unmatched: list[str] = []      # where a later step fed a tensor the first did not
        self.keyword_inputs = False
        self.replayed = 0                   # tensors given their first-step value
        # the first step's calls (model calls, ops that met a target) whose output fed its
        # backward, and their places: the batch. The rest (acting, logging) is left alone.
        self.fed: set[tuple] = set()
        self._fed_places: set[tuple] = set()
        self._seen: set[tuple] = set()      # the first step's calls
        self._calls: dict = {}
        self._calling: tuple | None = None
        self._lead = None

    @property
    def recorded(self) -> int:
        return sum(len(v) for k, v in self.inputs.items() if self._in_batch(k)) + \
            sum(1 for k in self.targets if self._in_batch(k[:2]))

    def _on_step(self, optimizer, args, kwargs) -> None:
        if self._lead is None:
            self._lead = optimizer
        if optimizer is self._lead:
            self.step += 1
            self._calls.clear()
            self.terms.next_step()

    def _occurrence(self, key) -> int:
        count = self._calls.get(key, 0)
        self._calls[key] = count + 1
        return count

    def _feeds(self, call: tuple, outputs) -> None:
        """At the first step: mark `call` (place, count) as the batch's if a backward reaches `outputs`."""
        def mark():
            self.fed.add(call)
            self._fed_places.add(call[0])
        _on_backward(outputs, mark)

    def _in_batch(self, call: tuple) -> bool:
        """Whether a call (place, count) is the batch's: it fed the first step's backward, or
        it is a later call at a place that did (then it must be replayed, or it is unmatched).
        NOTE: when no backward reached anything recorded (a hook that could not be set), every
        call counts, as before this was known."""
        if not self.fed or call in self.fed:
            return True
        return call not in self._seen and call[0] in self._fed_places

    def on_model(self, module, args):
        self._calling = None
        if not torch.is_grad_enabled():
            return None                     # an evaluation call, not training
        place = ("model", id(module), _call_path())
        key = (place, self._occurrence(place))
        self._calling = key
        if self.step == 0:
            self._seen.add(key)
            self.inputs[key] = {i: a.detach().clone() for i, a in enumerate(args) if _is_data(a)}
            return None
        if not self._in_batch(key):
            return None
        recorded = self.inputs.get(key)
        if recorded is None:
            if any(_is_data(a) for a in args):
                self.unmatched.append(f"call {key[1] + 1} of {type(module).__name__} at step {self.step + 1}")
            return None
        self.replayed += len(recorded)
        return tuple(recorded[i].clone() if i in recorded else a for i, a in enumerate(args))

    def after_model(self, module, args, kwargs, output) -> None:
        if torch.is_grad_enabled() and any(_is_data(v) for v in kwargs.values()):
            self.keyword_inputs = True
        if self.step == 0 and self._calling is not None:
            outs = [t for v in output.values() for t in _tensors(v)] if isinstance(output, dict) else \
                list(_tensors(output))
            self._feeds(self._calling, outs)

    def _on_call(self, func, args, kwargs):
        if not torch.is_grad_enabled() or not self.live:
            return func(*args, **kwargs)
        # NOTE: targets are met outside every model; a loss a model computes in its forward
        # (nanoGPT's, makemore's: targets passed in) still counts for the floor.
        flat = [] if self.depth else [t for a in (*args, *kwargs.values()) for t in _tensors(a)]
        call = None
        if any(t.requires_grad for t in flat) and any(_is_data(t) and t.numel() > 1 for t in flat):
            args, kwargs, call = self._targets(func, args, kwargs)
        name = getattr(func, "__name__", "")
        if name == _BACKWARD:
            self.terms.note_backward()
        out = func(*args, **kwargs)
        if call is not None and self.step == 0:
            self._feeds(call, _tensors(out))
        if name in ops.losses.FLOORS:
            where = self._locator.locate()
            site = (name,) + (tuple(where[:2]) if where else ())
            self.terms.note(func, args, kwargs, out, site[1:] + (self._occurrence(("loss", site)),))
        return out

    def _targets(self, func, args, kwargs):
        """The data arguments of an op that meets the model's output: recorded, or replayed."""
        where = self._locator.locate()
        site = (getattr(func, "__name__", str(func)),) + (tuple(where) if where else ())
        call = (site, self._occurrence(("op", site)))
        if self.step == 0:
            self._seen.add(call)
        elif not self._in_batch(call):
            return args, kwargs, None
        new_args = [self._target(call, i, a) for i, a in enumerate(args)]
        new_kwargs = {k: self._target(call, k, v) for k, v in kwargs.items()}
        return tuple(new_args), new_kwargs, call

    def _target(self, call, index, value):
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            return type(value)(self._target(call, (index, j), v) for j, v in enumerate(value))
        if not (_is_data(value) and value.numel() > 1):
            return value
        key = call + (index,)
        if self.step == 0:
            self.targets[key] = value.detach().clone()
            return value
        recorded = self.targets.get(key)
        if recorded is None:
            site = call[0]
            where = f"{os.path.basename(site[1])}:{site[2]}" if len(site) > 2 else site[0]
            self.unmatched.append(f"{site[0]} at {where}, step {self.step + 1}")
            return value
        self.replayed += 1
        return recorded.clone()


class ZeroInputs(ModelCalls):
    """Each model call's first data argument (floating point or integer) replaced by zeros.

    NOTE: integer inputs are token ids or indices: they become all 0, the first token of
    the vocabulary, a valid index of every embedding and one_hot, and the same for every
    sample, so it carries no information. Boolean tensors (masks) and the other arguments
    (hidden states, lengths) are left as they are: they are structure, not the input.
    """

    def __init__(self) -> None:
        super().__init__()
        self.zeroed = 0
        self.kinds: set[str] = set()
        self.trained = False    # whether a backward pass reached the output of a call given zeros
        self._given_zeros = False

    def on_model(self, module, args):
        for index, arg in enumerate(args):
            if _is_data(arg) and arg.dtype != torch.bool:
                self.zeroed += 1
                self._given_zeros = True
                self.kinds.add("floating point → 0.0" if arg.is_floating_point() else "integer (token ids) → 0")
                if not self.applied:
                    self.applied.append(f"the input of {type(module).__name__} replaced by zeros")
                return (*args[:index], torch.zeros_like(arg), *args[index + 1:])
        return None

    def after_model(self, module, args, kwargs, output) -> None:
        # NOTE: zeros that train nothing (a call to predict, while training runs the layer as
        # layer.forward(x), which no module hook sees) say nothing of the input's use
        if self._given_zeros and not self.trained:
            outs = [t for v in output.values() for t in _tensors(v)] if isinstance(output, dict) else \
                list(_tensors(output))
            _on_backward(outs, self._reached)
        self._given_zeros = False

    def _reached(self) -> None:
        self.trained = True


class InputTrace(ModelCalls):
    """Where the input's information is lost, in the first training call of a model.

    A tensor is informative when it comes from the input and differs between the samples
    of the batch (along dim 0). The first op that takes an informative tensor and returns
    one that is the same for every sample (`x * 0`) is where the input is lost, when the
    model's output is not informative either; if no op does and the output is not
    informative, the input never reached it (the forward used a constant instead). Ops that
    read only a shape (zeros_like) do not count. A constant op the input goes around (the
    `value == value` check a distribution makes of its logits) loses nothing: the output is
    informative. NOTE: an op that meets the input with a weight that trains (a zero-initialised
    table `W[idx]`, a zero-initialised layer) gives every sample the same output at step 0, but
    its gradient differs per sample and the next step's output will too: its output carries
    the input (`_carried`), constant for now, and the ops after it lose nothing.
    An input that arrives the same for every sample was lost before the model: at the op
    of the script that made varying data constant (a clamp of raw readings to [0, 1]),
    when that op was seen.
    """

    def __init__(self) -> None:
        super().__init__()
        self.done = False
        self.lost: dict | None = None        # {"op", "file", "line", "module"}
        self.reached: bool | None = None     # whether the model's output depends on its input
        self.forward: dict | None = None     # the model's forward: {"file", "line", "model"}
        self._active = False
        self._informative: dict[int, torch.Tensor] = {}
        self._carried: set[int] = set()       # informative ids the same for every sample for now
        self._candidate: dict | None = None   # the first op that made the input constant
        self._constant: dict[int, tuple] = {}   # id(data made the same for every sample) -> (ref, op, where)
        self._names: dict[int, str] = {}
        self._stack: list[nn.Module] = []
        self._locator = SourceLocator()
        self._mode = CallMode(self._on_call)

    def __enter__(self) -> "InputTrace":
        super().__enter__()
        self._handles.append(module_globals.register_module_forward_pre_hook(self._enter_module))
        self._handles.append(module_globals.register_module_forward_hook(self._leave_module, always_call=True))
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        super().__exit__(*exc)

    def _enter_module(self, module, args):
        if self._active:
            self._stack.append(module)

    def _leave_module(self, module, args, output):
        if self._active and self._stack and self._stack[-1] is module:
            self._stack.pop()

    def on_model(self, module, args):
        if self.done or not torch.is_grad_enabled():
            return None
        first = next((a for a in args if _is_data(a)), None)
        if first is not None and not _varies(first):
            made = self._constant.get(id(first))
            if made is not None and made[0]() is first and self.lost is None:
                self.done = True   # it arrives the same for every sample: lost where that was made
                self.lost = self._place(made[1], made[2], None)
            return None
        if first is None:
            return None
        self.done = self._active = True
        self._informative = {id(first): first}
        self._names = {id(m): name for name, m in module.named_modules()}
        self.forward = _forward_site(module)
        return None

    def after_model(self, module, args, kwargs, output) -> None:
        if not self._active:
            return
        outs = list(_tensors(output)) if not isinstance(output, dict) else \
            [t for v in output.values() for t in _tensors(v)]
        self.reached = any(id(t) in self._informative for t in outs)
        if not self.reached:
            self.lost = self._candidate
        self._active = False
        self._informative.clear()
        self._carried.clear()
        self._stack.clear()

    def _on_call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        if not self.live or (self.done and not self._active):
            return out
        try:
            with reading():
                if not self._active:
                    self._note_constant(func, args, kwargs, out)
                else:
                    self._follow(func, args, kwargs, out)
        except Exception:   # it only reads: an op it cannot read ends the trace, never the program
            if AuditConfig().strict:
                raise
            self.done, self._active, self.lost, self.reached = True, False, None, None
        return out

    def _follow(self, func, args, kwargs, out) -> None:
        """An op of the traced model call: which of its outputs still carry the input."""
        given = [t for a in (*args, *kwargs.values()) for t in _tensors(a)]
        inputs = [t for t in given if id(t) in self._informative]
        if not inputs:
            return
        name = getattr(func, "__name__", "")
        # varying inputs made constant by a weight that trains, or inputs constant already: carried
        carried = all(id(t) in self._carried for t in inputs) or \
            any(t.requires_grad and id(t) not in self._informative for t in given)
        for t in _tensors(out):
            if _varies(t):
                self._informative[id(t)] = t
                self._carried.discard(id(t))
            elif name in _SHAPE_ONLY:
                continue
            elif t.dim() == 0 or t.shape[0] < 2:
                self._informative[id(t)] = t   # no samples to compare (a reduced loss): it carries the input
            elif carried:
                self._informative[id(t)] = t
                self._carried.add(id(t))
            else:
                self._informative.pop(id(t), None)
                if self._candidate is None:
                    self._candidate = self._at(name)

    def _note_constant(self, func, args, kwargs, out) -> None:
        """Before the first model call: data that varied over the batch, made the same for
        every sample by one op (preprocessing: a clamp of raw readings to [0, 1])."""
        name = getattr(func, "__name__", "")
        if name in _SHAPE_ONLY:
            return
        inputs = [t for a in (*args, *kwargs.values()) for t in _tensors(a) if _is_data(t) and t.is_floating_point()]
        if not inputs:
            return
        # NOTE: data made from constant data keeps its origin (a batch x_all[rows] of a
        # dataset that was clamped whole before training began).
        known = next((self._constant[id(t)] for t in inputs if id(t) in self._constant
                      and self._constant[id(t)][0]() is t), None)
        if known is None and not any(_varies(t) for t in inputs):
            return
        for t in _tensors(out):
            if _is_data(t) and t.dim() >= 1 and t.shape[0] > 1 and not _varies(t):
                op, where = (known[1], known[2]) if known is not None else (name, self._locator.locate())
                self._constant[id(t)] = (weakref.ref(t), op, where)

    def _at(self, name: str) -> dict:
        module = self._names.get(id(self._stack[-1])) if self._stack else None
        return self._place(name, self._locator.locate(), module)

    @staticmethod
    def _place(name: str, where, module: str | None) -> dict:
        return {"op": name.rstrip("_").lstrip("_") or name, "file": where[0] if where else None,
                "line": where[1] if where else None, "module": module}


def _varies(t: torch.Tensor) -> bool:
    """Whether the samples of a batch (dim 0) differ. A sparse or otherwise unstrided tensor
    (a graph's adjacency, a sparse feature matrix) is taken to vary: rows of it cannot be
    compared without making it dense, and the trace must never claim a loss it did not see."""
    if t.dim() == 0 or t.shape[0] < 2 or t.numel() == 0:
        return False
    if t.layout != torch.strided:
        return True
    with torch.no_grad():
        # NOTE: rows 0 and 1 differ in almost every batch that varies: one row's compare then
        # decides, not the whole tensor's (a data set built row by row is read once per row)
        return not torch.equal(t[0], t[1]) or bool((t != t[:1]).any())


def _forward_site(module: nn.Module) -> dict | None:
    """Where the model's class defines forward, when that is the user's code."""
    try:
        file = inspect.getsourcefile(type(module).forward)
        line = inspect.getsourcelines(type(module).forward)[1]
    except (OSError, TypeError):
        return None
    if file is None or is_internal(file):
        return None
    return {"file": file, "line": line, "model": type(module).__name__}
