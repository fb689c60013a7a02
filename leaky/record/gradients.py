"""Backward-pass recording: one hook per autograd node, values kept on the device.

For each node the hook sees the gradient arriving from the loss side (`grad_outputs` in
autograd's naming) and the gradients it sends to its inputs (`grad_inputs`). It records
their norms and, for elementwise nodes, how many elements were nonzero before and after,
as 0-d device tensors in a per-step list (record/step_record.py); `StepBuffer.flush` stacks
them and copies them to the host once per step.
"""
from __future__ import annotations

import weakref
from functools import lru_cache, partial

import torch
from torch import Tensor

from leaky import ops
from leaky.process import distributed
from leaky.process.guards import outside_graphs
from leaky.record.step_record import NodeRecord, StepBuffer


_node_traits = ops.node_traits


def leads_to_param(node, depth: int = 3) -> bool:
    """True for AccumulateGrad, and for a short chain of pass-through nodes ending in one
    (a weight's transpose, an autocast copy: they carry a parameter's gradient, not an
    activation's)."""
    if node is None:
        return False
    kind = _node_traits(type(node))
    if kind.accumulates:
        return True
    if depth == 0 or not kind.passes_gradient:
        return False
    inputs = [fn for fn, _ in node.next_functions if fn is not None]
    return len(inputs) == 1 and leads_to_param(inputs[0], depth - 1)


def slot_kinds(next_functions: tuple) -> tuple[list[int], list]:
    """Per input slot of a node (its `next_functions`): its kind, 0 nothing, 1 an activation's
    node, 2 a parameter's (leads_to_param); and, for a kind 2 slot, the parameter whose .grad
    will hold exactly what the slot sends (_slot), else None. One walk per slot answers both."""
    kinds, params = [], []
    for fn, _ in next_functions:
        kind, param = (0, None) if fn is None else _slot(fn)
        kinds.append(kind)
        params.append(param)
    return kinds, params


def _slot(fn, depth: int = 3) -> tuple[int, object]:
    """leads_to_param(fn) as kind 2 (else 1), with the parameter at the end of the chain when
    every node on the way only moves values (a weight's transpose): its .grad will hold
    exactly the values sent into the chain. None otherwise (an expand sums, an autocast copy
    changes the dtype)."""
    moves = True
    for _ in range(depth + 1):
        kind = _node_traits(type(fn))
        if kind.accumulates:
            return 2, fn.variable if moves else None
        if not kind.passes_gradient:
            return 1, None
        moves = moves and kind.moves_values
        inputs = [f for f, _ in fn.next_functions if f is not None]
        if len(inputs) != 1:
            return 1, None
        fn = inputs[0]
    return 1, None


def _dense(grad: Tensor) -> Tensor:
    """A sparse gradient's stored values: the same norm, and counts of what is stored."""
    return grad.coalesce().values() if grad.is_sparse else grad


# NOTE: counting the nonzero elements of a large gradient is a full pass over it (on a conv net,
# a large share of a step: docs/performance.md). Above 2**16 elements, the elements at a fixed
# stride of the contiguous tensor are counted and the count scaled up: the stride is the
# smallest prime >= 17 (and >= numel / 2**15) that divides no dimension, so the sample cycles
# through every row, column and channel and holds 2**15 to 2**16 elements (3,855 at the fewest):
# the share estimated from it has a standard error under 0.8% (0.3% above 2**19 elements). The
# arriving and the leaving gradient of an op are sampled at the same positions.
_SAMPLE_ABOVE = 1 << 16
_SAMPLE_STRIDE = 17
_SAMPLE_TARGET = 1 << 15


@lru_cache(maxsize=256)
def _stride(shape: tuple[int, ...], numel: int) -> int:
    candidate = max(_SAMPLE_STRIDE, numel // _SAMPLE_TARGET)
    while not _is_prime(candidate) or any(dim % candidate == 0 for dim in shape if dim > 1):
        candidate += 1
    return candidate


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % k for k in range(2, int(n ** 0.5) + 1))


def _count_nonzero(grad: Tensor) -> Tensor:
    numel = grad.numel()
    if numel < _SAMPLE_ABOVE or not grad.is_contiguous():
        return torch.count_nonzero(grad)
    sample = grad.view(-1)[::_stride(tuple(grad.shape), numel)]
    return torch.count_nonzero(sample) * (numel / sample.numel())


# NOTE: only nodes whose local derivative can be exactly 0 on some elements (ops.counts_zeros)
# get their nonzero elements counted: for an add, a view or a matmul the count is wasted work.
def can_zero(node) -> bool:
    return _node_traits(type(node)).counts_zeros


# NOTE: a node whose backward only moves the arriving values into place (ops.moves_values:
# views, transposes, a select or a slice, a split, a max-pool whose windows do not overlap)
# sends exactly the arriving values plus zeros, so its norm is sqrt(sum of the arriving norms
# squared): not taken again.
moves_values = ops.moves_values


def _unchanged(taken: dict, grad: Tensor):
    """What `taken` (id -> (weak reference, version, value)) holds for this very tensor at its
    present version, else None: autograd may add into a gradient in place (a tensor used
    twice), which bumps its version, and a freed tensor's id may be reused."""
    entry = taken.get(id(grad))
    if entry is not None and entry[0]() is grad and entry[1] == grad._version:
        return entry[2]
    return None


def _mass(arriving: Tensor, sent: Tensor) -> tuple[Tensor, Tensor]:
    """(Σ|g_in|, Σ|g_in| over the elements sent on as exactly 0): the gradient mass arriving
    at an elementwise op, and the part of it the op zeroed (a clamp on a BCE input zeroes few
    elements, but those past the bound on the wrong side carry gradients near 1/eps)."""
    size = arriving.abs().float()
    return size.sum(), size.masked_fill(sent != 0, 0.0).sum()


# NOTE: underflow is judged against float32. float16's smallest normal is 2**-14 (6.1e-5)
# and it flushes below 2**-24, where float32 holds values down to 1e-38 (and 1e-45
# subnormal). bfloat16 has float32's exponent range: a bfloat16 gradient is 0 or subnormal
# only where the float32 one would be too, so it has no underflow of its own to count.
_SMALL_RANGE = (torch.float16,)


class GradientRecorder:
    """Registers node hooks and writes what they see into a StepBuffer."""

    def __init__(self, buffer: StepBuffer, on_error, count_now=lambda: True) -> None:
        self.buffer = buffer
        self.on_error = on_error
        self.count_now = count_now   # whether this step counts zeroed shares (see RATE_GAP)
        self.handles: list = []
        self.active = True
        # id(gradient) -> (weak reference, version, norm): the norm of a gradient one node
        # sent toward the activations, reused when it arrives, unchanged, at the next node.
        self._sent: dict[int, tuple] = {}
        # id(gradient) -> (weak reference, version, nonzero count): the count of a gradient one
        # counted node sent, reused when it arrives, unchanged, at the next counted node (a
        # dropout feeding a softmax feeding a mask: each gradient between them counted once)
        self._counted: dict[int, tuple] = {}
        # NOTE: a weight's gradient is sent as its transpose and stored by AccumulateGrad as
        # a fresh contiguous copy: not the tensor normed. If the parameter had no .grad and
        # got a single gradient in this backward, its new .grad holds exactly those values:
        # a hook after the accumulation files the norm under the new .grad (same object and
        # version checked when it is read). id(param) -> (norm, dtype), None after a second.
        self._fresh: dict[int, tuple | None] = {}
        self._accumulated: dict[int, object] = {}   # id(param) -> its post-accumulate hook handle
        self._distributed: bool | None = None      # torch.distributed running: looked up once a step
        # sites of dead-zone ops on the loss path (record/loss_path.py, set at each sampled
        # backward): their counted nodes also measure the gradient mass they zero (_mass)
        self.mass_sites: set[int] = set()
        # sequence numbers of the nodes whose arriving gradient carries zeros on purpose: it
        # comes from a node that zeroes elements by design (a ReLU, a mask, a clamp), directly or
        # through nodes that only move values. Their zeros are not underflow.
        self._zero_fed: set[int] = set()

    def watch(self, node, site: int, slots: tuple[list[int], list] | None = None) -> None:
        """Hook `node`; `slots`: slot_kinds of its next_functions, when the caller has them."""
        kinds, found = slot_kinds(node.next_functions) if slots is None else slots
        params = 2 in kinds
        traits = _node_traits(type(node))
        moves = not params and kinds.count(1) == 1 and moves_values(node)
        owners = tuple(None if param is None else self._owner(param) for param in found) if params else ()
        if traits.zeros_on_purpose:
            self._feeds_zeros(node)
        hook = partial(self._on_backward, site, node._sequence_nr(), tuple(kinds), traits.counts_zeros, moves, owners)
        self.handles.append(node.register_hook(hook))

    def _feeds_zeros(self, node, depth: int = 8) -> None:
        for fn, _ in node.next_functions:
            if fn is None or depth == 0 or leads_to_param(fn):
                continue
            self._zero_fed.add(fn._sequence_nr())
            if moves_values(fn):
                self._feeds_zeros(fn, depth - 1)

    def _owner(self, param):
        """`param`, whose .grad will equal what a slot sends (it, or through a transpose or a
        view: slot_kinds), with a hook after its accumulation; None where its .grad is normed
        on its own. The hooks stay on while steps are sampled."""
        if self._distributed is None:
            self._distributed = distributed.running()
        if distributed.is_dtensor(param) or self._distributed:
            return None   # DDP and FSDP rewrite .grad after the accumulation
        if id(param) not in self._accumulated:
            self._accumulated[id(param)] = param.register_post_accumulate_grad_hook(self._on_accumulated)
        return param

    @outside_graphs
    def _on_accumulated(self, param) -> None:
        entry = self._fresh.pop(id(param), None)
        grad = param.grad
        if entry is None or grad is None or grad.dtype != entry[1] or grad.is_sparse:
            return
        try:
            self._sent[id(grad)] = (weakref.ref(grad), grad._version, entry[0])
        except TypeError:   # a tensor subclass without weak references
            pass

    def remove_all(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self._forget_params()

    def forget_handles(self) -> None:
        """Graphs of finished steps are gone; their handles need no removal. The hooks on
        parameters stay while steps are sampled (see pause)."""
        self.handles.clear()
        self._zero_fed.clear()
        self._sent.clear()
        self._counted.clear()
        self._fresh.clear()
        self._distributed = None

    def pause(self) -> None:
        """The next step is not sampled: no hook of ours may run in it."""
        self._forget_params()

    def _forget_params(self) -> None:
        for handle in self._accumulated.values():
            handle.remove()
        self._accumulated.clear()
        self._fresh.clear()

    @outside_graphs   # as every callback leaky gives torch (process/guards.py)
    def _on_backward(self, site: int, seq: int, kinds: tuple, zeroing: bool, moves: bool, owners: tuple,
                     grad_inputs, grad_outputs) -> None:
        if not self.active:
            return
        # NOTE: no gradient mode: under create_graph=True the gradients themselves require
        # grad, and our norms must not join the user's double-backward graph (without it,
        # the usual case, grad mode is already off in backward and is left alone).
        grad_on = torch.is_grad_enabled()
        try:
            with torch._C.DisableTorchFunction():
                if grad_on:
                    torch._C._set_grad_enabled(False)
                self._record(site, seq, kinds, zeroing, moves, grad_inputs, grad_outputs)
                if 2 in kinds:
                    self._note_fresh(kinds, owners, grad_inputs)
        except Exception as exc:  # leaky's own failure must not stop the user's backward
            self.on_error(exc)
        finally:
            if grad_on:
                torch._C._set_grad_enabled(True)

    def _note_fresh(self, kinds: tuple, owners: tuple, grad_inputs) -> None:
        """After _record: each parameter's single fresh gradient and its norm (see _fresh)."""
        for kind, param, grad in zip(kinds, owners, grad_inputs):
            if kind != 2 or param is None or grad is None:
                continue
            key = id(param)
            if key in self._fresh or param.grad is not None:
                self._fresh[key] = None   # a second gradient, or one added to an existing .grad
                continue
            entry = self._sent.get(id(grad))
            self._fresh[key] = (entry[2], grad.dtype) if entry is not None and entry[0]() is grad else None

    def known_norm(self, grad: Tensor) -> Tensor | None:
        """The norm already taken of this very gradient, unchanged, in this step's backward:
        a parameter's .grad is, after a single use, the tensor its node sent."""
        return _unchanged(self._sent, grad)

    def _norms(self, arriving: list[Tensor], acts: list[Tensor], params: list[Tensor],
               moves: bool = False) -> list[Tensor]:
        """Norms of the arriving, activation and parameter gradients, in that order; with
        `moves` (see moves_values), the one activation gradient's norm comes from the arriving ones.

        NOTE: the gradient a node sends to its input is, most of the time, the very tensor
        that arrives at the next node: its norm is taken once. A hit must be the same live
        tensor at the same version: autograd may add a second contribution into it in
        place (a tensor used twice), which bumps its version, and then it is normed again.
        """
        sent = self._sent
        known = [_unchanged(sent, grad) for grad in arriving]
        todo = [grad for grad, norm in zip(arriving, known) if norm is None]
        moved = moves and len(acts) == 1 and not params
        if not moved:
            todo += acts
            todo += params
        computed = iter(torch._foreach_norm(todo)) if todo else iter(())
        norms = [next(computed) if norm is None else norm for norm in known]
        if moved:
            norms.append(norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms)))
        norms.extend(computed)
        try:
            for grad, norm in zip(acts + params, norms[len(arriving):]):
                sent[id(grad)] = (weakref.ref(grad), grad._version, norm)
        except TypeError:   # a tensor subclass without weak references: its norms are not reused
            pass
        return norms

    def _arriving_count(self, grad: Tensor) -> Tensor:
        """The nonzero count of a gradient arriving: the one taken when a counted node sent
        this very tensor, at this version (see _norms), else a new one."""
        count = _unchanged(self._counted, grad)
        return count if count is not None else _count_nonzero(grad)

    def _sent_count(self, grad: Tensor) -> Tensor:
        count = _count_nonzero(grad)
        try:
            self._counted[id(grad)] = (weakref.ref(grad), grad._version, count)
        except TypeError:   # a tensor subclass without weak references
            pass
        return count

    def _record(self, site, seq, kinds, zeroing, moves, grad_inputs, grad_outputs) -> None:
        arriving = [_dense(g) if g.is_sparse else g for g in grad_outputs if g is not None]
        if not arriving or arriving[0].is_meta:
            return   # no values on the meta device
        acts, params = [], []
        for g, k in zip(grad_inputs, kinds):
            if g is not None and k:
                (acts if k == 1 else params).append(_dense(g) if g.is_sparse else g)
        values = self.buffer.values
        offset = len(values)
        values.extend(self._norms(arriving, acts, params, moves))
        numel_in = arriving[0].numel() if len(arriving) == 1 else sum(g.numel() for g in arriving)
        # NOTE: only an elementwise node (one input gradient the same size as the one
        # arriving) can "set an element's gradient to zero"; for a matmul or a reduction
        # the element correspondence does not exist.
        matched = ([g for g in acts if g.numel() == numel_in] if zeroing and len(arriving) == 1 and self.count_now()
                   else [])
        counted = bool(matched)
        if counted:
            values.append(self._arriving_count(arriving[0]))
            if len(matched) == 1:
                values.append(self._sent_count(matched[0]))
            else:
                values.append(torch.stack([self._sent_count(g) for g in matched]).max())
        massed = counted and len(matched) == 1 and site in self.mass_sites
        half = not zeroing and arriving[0].dtype in _SMALL_RANGE and seq not in self._zero_fed
        if half:
            # NOTE: a dense gradient (not from a ReLU, a mask, a clamp...) has no exact zeros
            # in float32; in float16 the values below 2**-24 flush to 0 and those below the
            # smallest normal (6.1e-5) keep only a few bits.
            g = arriving[0]
            tiny = torch.finfo(g.dtype).tiny
            values.append(g.numel() - _count_nonzero(g))
            values.append(((g != 0) & (g.abs() < tiny)).sum())
        if massed:
            values.extend(_mass(arriving[0], matched[0]))
        self.buffer.records.append(
            NodeRecord(site, seq, offset, len(arriving), len(acts), len(params), counted, numel_in, half, massed))
