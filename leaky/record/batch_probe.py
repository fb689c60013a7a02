"""LK306's probe: does the model's output for one sample depend on other samples?

Once per root model, for its first call that builds a graph (in an audit), the forward
runs again on a copy of the same inputs, at the end of that step (the step's own graph
is gone by then), and backprop charts the dependencies. For one output
row i (a random cotangent on it), the gradient with respect to the whole input batch must
be zero in every row j != i: a per-sample model has no path from x_j to y_i. The test is
exact: a path that does not exist sends exactly 0 (0 · w sums to 0), whatever the weights.

Which dim is the batch? Dim 0 of the input (a DataLoader's collate, batch_first), or
dim 1 as well in a model with a time-major module (see _batch_dims). It is paired with
every output dim of the same size N >= 2, and rows 0 and N - 1 are read (the last row of
a time dim draws on all earlier steps, so a time dim never passes for a batch dim). The
model is per-sample if one such pair keeps both rows apart; it mixes the batch if none does.
Integer inputs (token ids) are differentiated through: the output of the embedding that
reads them stands in for them.

If it mixes, a second run finds where: the first op, in forward order, whose output has a
dim of size N along which no row stays apart (a `view` that scattered the batch over
time, a softmax over dim 0, a matmul that contracts over the batch).

Mixing by design is named, not reported as a bug: batch norm in training mode is probed in
eval mode (its running statistics, per sample; the modules switched are kept as
evidence), a batch norm without running statistics, message passing over a graph given
as an input (a matmul with a square N x N operand that is not a parameter), and a
mixture-of-experts router that spreads capacity over the batch.

The probe changes nothing: it runs on copies of the inputs, with torch.autograd.grad
(no parameter's .grad is touched), under torch.random.fork_rng (the random state is
restored), with every buffer copied back afterwards (running statistics), the user's
hooks off and what `forward` writes on its modules put back (see _untouched), and with
none of leaky's instruments on (Recorder.left_out).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor, nn
from torch.nn.modules import module as module_globals
from torch.nn.modules.batchnorm import _BatchNorm
from torch.overrides import TorchFunctionMode

from leaky import ops
from leaky.record.opmode import op_name
from leaky.stats import BATCHNORM_NO_STATS, GRAPH, ROUTER

ROOTS = 4             # root models probed per audit
TRIES = 8             # calls of one root tried while none gives a batch to compare (a batch of one)
CAPTURED = 2048       # intermediate tensors kept while looking for where the mixing starts
UNMATCHED = "no dim of the output of size 2 or more has the size of the input's batch dim"
_WRAPPERS = {"OptimizedModule": "_orig_mod", "DistributedDataParallel": "module", "DataParallel": "module",
             "FullyShardedDataParallel": "module"}
_ROUTER = re.compile(r"moe|mixture|expert|router|routing", re.IGNORECASE)



@dataclass
class MixingRecord:
    """What the probe of one root model saw (module keys, raw source locations)."""

    root: int
    judged: bool = False
    mixed: bool = False
    note: str = ""                      # why it was not judged
    point: str = ""                     # what was differentiated: "input 0", "the embedding of input 0"
    batch: int = 0                      # N, the size of the dim whose rows were compared
    row: int = 0                        # the output row whose gradient was read
    reached: int = 0                    # other samples that row depends on
    pairs: int = 0                      # (input dim, output dim) pairs of size N tried
    first_op: str | None = None
    first_module: int | None = None
    first_where: tuple | None = None
    first_dim: int | None = None
    first_shape: tuple[int, ...] | None = None
    first_time_major: bool = False      # that module reads (T, B, ...): batch_first=False
    by_design: str | None = None        # BATCHNORM_NO_STATS | GRAPH | ROUTER
    batchnorm_eval: tuple[int, ...] = ()   # modules probed in eval mode
    extra: dict = field(default_factory=dict)


class BatchProbe:
    """Notes each root model's first graph-building call (a copy of its inputs) and probes
    it at the end of that step, once the step's own graph is gone: the probe's forward
    and backward never sit in memory next to the user's."""

    def __init__(self, left_out: Callable, key_of: Callable[[nn.Module], int], locate: Callable) -> None:
        self.left_out = left_out     # a context: leaky's own instruments off
        self.key_of = key_of
        self.locate = locate
        self.records: list[MixingRecord] = []
        self._seen: set[int] = set()
        self._tries: dict[int, int] = {}
        self._dims: dict[int, tuple[int, ...]] = {}
        self._pending: list[tuple] = []

    def after_call(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if len(self._seen) >= ROOTS or id(module) in self._seen or any(p[0] is module for p in self._pending):
            return
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
            return   # an evaluation: the model's training call comes later
        if not any(t.requires_grad for t in _tensors(output) if t.is_floating_point()):
            return
        if next(module.parameters(), None) is None:
            return   # a loss module (nn.CrossEntropyLoss()): it reduces the batch by design
        inner = _unwrapped(module)
        dims = self._dims.get(id(module))
        if dims is None:
            dims = self._dims[id(module)] = _batch_dims(inner)
        if not any(t.ndim > d and t.shape[d] >= 2 for t in _tensors((args, kwargs or {})) for d in dims):
            return   # a batch of one (a DQN acting on one observation): probe a later call
        self._pending.append((module, inner, dims, _snapshot(args), _snapshot(kwargs or {})))

    def run_pending(self) -> None:
        """Probe the calls noted during the step that just ended."""
        pending, self._pending = self._pending, []
        for module, inner, dims, args, kwargs in pending:
            tries = self._tries[id(module)] = self._tries.get(id(module), 0) + 1
            record = MixingRecord(self.key_of(module))
            with self.left_out():
                _probe(inner, args, kwargs, dims, record, self.key_of, self.locate)
            if record.note == UNMATCHED and tries < TRIES:
                continue   # no output dim matched: maybe a later call's will
            self._seen.add(id(module))
            self.records.append(record)


def _snapshot(value: Any, depth: int = 2) -> Any:
    """The call's inputs as they were: each tensor copied (a loader may reuse its buffers)."""
    if isinstance(value, Tensor):
        return value.detach().clone()
    if depth and isinstance(value, dict) and type(value) is dict:
        return {k: _snapshot(v, depth - 1) for k, v in value.items()}
    if depth and type(value) in (tuple, list):
        return type(value)(_snapshot(v, depth - 1) for v in value)
    return value


def _unwrapped(module: nn.Module) -> nn.Module:
    """The eager model under torch.compile's and DDP's wrappers (no recompile, no collective)."""
    while (attr := _WRAPPERS.get(type(module).__name__)) and isinstance(getattr(module, attr, None), nn.Module):
        module = getattr(module, attr)
    return module


def _tensors(value: Any, depth: int = 2) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if depth == 0:
        return []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item, depth - 1)]
    return []


def _copy(value: Any, leaves: list, ids: dict, where: str, depth: int = 2) -> Any:
    """The inputs again, each tensor copied: floating ones as leaves to differentiate,
    integer ones noted so that the embedding reading them can stand in for them."""
    if isinstance(value, Tensor):
        if value.ndim == 0 or value.layout != torch.strided or not value.numel():
            return value   # a scalar, or a sparse matrix (a graph's adjacency): not a batch of samples
        copy = value.detach().clone()
        if value.is_floating_point():
            copy.requires_grad_()
            leaves.append((copy, where))
        elif value.dtype != torch.bool and not value.is_complex():
            ids[copy.untyped_storage().data_ptr()] = where
        return copy
    if depth == 0:
        return value
    if isinstance(value, dict):
        return type(value)(**{k: _copy(v, leaves, ids, f"{where}{'.' if where else ''}{k}", depth - 1)
                              for k, v in value.items()}) if _rebuildable(value) else value
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        return type(value)(_copy(v, leaves, ids, f"{where}[{i}]", depth - 1) for i, v in enumerate(value))
    return value


def _position(where: str) -> tuple:
    """Sorts "input 0" and "the output of embedding e (it reads input 0)" before "input 1"."""
    found = re.search(r"input (\w+)", where)
    name = found.group(1) if found else where
    return (0, int(name)) if name.isdigit() else (1, 0)


def _rebuildable(value: dict) -> bool:
    return type(value) is dict


@contextmanager
def _batchnorm_in_eval(model: nn.Module):
    """Batch norm in training mode normalises over the batch: by design. Probe it in eval
    mode, on its running statistics (the modes are put back)."""
    switched = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.training
                and m.track_running_stats and m.running_mean is not None]
    for m in switched:
        m.train(False)
    try:
        yield switched
    finally:
        for m in switched:
            m.train(True)


@contextmanager
def _buffers_kept(model: nn.Module):
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                # NOTE: through .data, which keeps the version counter: a graph of the user's
                # that saved this buffer (batch norm saves its running statistics) sees the
                # values it saw before the probe, and no in-place write.
                if buffer.shape == value.shape and not torch.equal(buffer, value):
                    buffer.data.copy_(value)


_HOOKS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
          "_forward_hooks_always_called", "_backward_pre_hooks", "_backward_hooks")
_GLOBAL_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_forward_hooks_with_kwargs",
                 "_global_forward_hooks_always_called", "_global_backward_pre_hooks", "_global_backward_hooks")
_INTERNAL = frozenset(_HOOKS) | {"_parameters", "_buffers", "_modules", "training", "_non_persistent_buffers_set",
                                 "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                                 "_load_state_dict_post_hooks", "_is_full_backward_hook"}


@contextmanager
def _untouched(model: nn.Module):
    """The user's own hooks do not run (a hook that keeps the last activation would keep the
    probe's), and what `forward` writes on its modules is put back (a call counter, a cache,
    a list it appends to). Hooks that compute a weight (weight_norm, pruning) are off too:
    their last result stays in place, and the dependencies are the same."""
    modules = list(model.modules())
    hooks = [(m, name, getattr(m, name)) for m in modules for name in _HOOKS if hasattr(m, name)]
    globals_ = [(name, getattr(module_globals, name)) for name in _GLOBAL_HOOKS if hasattr(module_globals, name)]
    state = [(m, {k: v for k, v in vars(m).items() if k not in _INTERNAL}) for m in modules]
    contents = [(v, list(v) if isinstance(v, list) else dict(v)) for _, attrs in state for v in attrs.values()
                if type(v) in (list, dict)]
    for m, name, _ in hooks:
        setattr(m, name, type(getattr(m, name))())
    for name, value in globals_:
        setattr(module_globals, name, type(value)())
    try:
        yield
    finally:
        for m, name, value in hooks:
            setattr(m, name, value)
        for name, value in globals_:
            setattr(module_globals, name, value)
        for m, attrs in state:
            now = vars(m)
            for key in [k for k in now if k not in _INTERNAL and k not in attrs]:
                del now[key]
            for key, value in attrs.items():
                if now.get(key) is not value:
                    now[key] = value
        for value, saved in contents:
            if isinstance(value, list):
                value[:] = saved
            else:
                value.clear()
                value.update(saved)


@contextmanager
def _embedding_stand_ins(model: nn.Module, ids: dict, leaves: list, names: dict):
    """An embedding that reads an integer input returns a leaf copy of its output: the
    point to differentiate for token ids."""
    def hook(module, inputs, out):
        index = inputs[0] if inputs else None
        if not isinstance(index, Tensor) or not isinstance(out, Tensor) or not out.is_floating_point():
            return None
        where = ids.get(index.untyped_storage().data_ptr())
        if where is None:
            return None
        leaf = out.detach().requires_grad_()
        leaves.append((leaf, f"the output of embedding {names.get(id(module), type(module).__name__)} "
                             f"(it reads {where})"))
        return leaf

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Embedding)] if ids else []
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _reach(out: Tensor, out_dim: int, row: int, point: Tensor, point_dim: int) -> int | None:
    """How many rows of `point` along point_dim, other than `row`, output row `row` (along
    out_dim) depends on; None if it depends on none of them at all."""
    gen = torch.Generator(device=out.device).manual_seed(row)
    picked = out.select(out_dim, row)
    weights = torch.randn(picked.shape, generator=gen, device=out.device, dtype=picked.dtype)
    (grad,) = torch.autograd.grad((picked * weights).sum(), point, retain_graph=True, allow_unused=True)
    if grad is None:
        return None
    touched = ((grad != 0) & grad.isfinite()).movedim(point_dim, 0).reshape(grad.shape[point_dim], -1).any(1)
    if not bool(touched.any()):
        return None
    touched[row] = False
    return int(touched.sum())


@dataclass
class _Verdict:
    mixed: bool
    batch: int = 0
    row: int = 0
    reached: int = 0
    pairs: int = 0
    dim: int = 0        # the point's dim judged as the batch


def _judge(out: Tensor, point: Tensor, point_dims: tuple[int, ...]) -> _Verdict | None:
    """Mixed iff some (point dim, output dim) pair of one size N >= 2 was related and no
    such pair keeps rows 0 and N - 1 apart, for each of `point_dims` (where the batch can
    be). None when nothing relates them."""
    pairs = [(pd, od) for pd in point_dims if pd < point.ndim
             for od in range(out.ndim) if point.shape[pd] == out.shape[od] >= 2]
    pairs.sort(key=lambda p: (p[0] != p[1], p))   # same position first: (0, 0) is the usual batch
    worst: _Verdict | None = None
    related = 0
    for pd, od in pairs:
        size = out.shape[od]
        reaches = [(_reach(out, od, row, point, pd), row) for row in (0, size - 1)]
        seen = [(r, row) for r, row in reaches if r is not None]
        if not seen:
            continue
        related += 1
        if all(r == 0 for r, _ in seen):
            return _Verdict(False, size, 0, 0, related, pd)
        reached, row = max(seen)
        if worst is None or reached > worst.reached:
            worst = _Verdict(True, size, row, reached, 0, pd)
    if worst is not None:
        worst.pairs = related
    return worst


def _batch_dims(model: nn.Module) -> tuple[int, ...]:
    """Where the batch can be in an input: dim 0 (a DataLoader's collate, batch_first), or
    also dim 1 in a model with a time-major module (nn.LSTM, nn.MultiheadAttention,
    nn.TransformerEncoderLayer with batch_first=False: its inputs are (T, B, ...)).

    NOTE: which dim is the batch cannot be read from the dependencies alone: a model that
    mixes dim 0 and keeps dim 1 apart is either time-major and per-sample, or batch-first
    and mixing. Only a time-major module makes the first reading plausible."""
    time_major = any(getattr(m, "batch_first", None) is False for m in model.modules())
    return (0, 1) if time_major else (0,)


class _Capture(TorchFunctionMode):
    """Keeps each op's floating outputs that are on the graph, with where it ran."""

    def __init__(self, locate: Callable, current: Callable[[], nn.Module | None], given: Callable) -> None:
        super().__init__()
        self.locate, self.current, self.given = locate, current, given
        self.seen: list[tuple[str, Tensor, Any, Any, bool]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if len(self.seen) < CAPTURED:
            op = op_name(func)
            outs = [t for t in _tensors(out, 1) if t.is_floating_point() and t.requires_grad]
            if outs:
                given = self.given(args)
                self.seen.extend((op, t, self.locate(), self.current(), given) for t in outs)
        return out


@contextmanager
def _module_stack():
    stack: list[nn.Module] = []

    def enter(module, args) -> None:
        stack.append(module)

    def leave(module, args, output) -> None:   # returns None: the output is left as it is
        if stack:
            stack.pop()

    pre = module_globals.register_module_forward_pre_hook(enter)
    post = module_globals.register_module_forward_hook(leave, always_call=True)
    try:
        yield lambda: stack[-1] if stack else None
    finally:
        pre.remove()
        post.remove()


def _probe(model: nn.Module, args: tuple, kwargs: dict, dims: tuple[int, ...], record: MixingRecord, key_of,
           locate) -> None:
    params = list(model.parameters())
    devices = sorted({p.device.index or 0 for p in params if p.device.type == "cuda"})
    names = {id(m): path for path, m in model.named_modules()}
    try:
        with torch.random.fork_rng(devices=devices), _untouched(model), _batchnorm_in_eval(model) as switched, \
                _buffers_kept(model), torch.enable_grad():
            record.batchnorm_eval = tuple(key_of(m) for m in switched)
            leaves: list = []
            ids: dict = {}
            args2 = tuple(_copy(a, leaves, ids, f"input {i}") for i, a in enumerate(args))
            kwargs2 = {k: _copy(v, leaves, ids, f"input {k}") for k, v in kwargs.items()}
            if not leaves and not ids:
                record.note = "no batched tensor input"
                return
            with _embedding_stand_ins(model, ids, leaves, names):
                output = model(*args2, **kwargs2)
            outs = [t for t in _tensors(output) if t.is_floating_point() and t.requires_grad and t.ndim >= 1]
            leaves.sort(key=lambda leaf: _position(leaf[1]))   # the data (input 0, its embedding) first
            if not leaves:
                record.note = "integer inputs read by no nn.Embedding"
                return
            found = None
            for out in outs:
                for leaf, where in leaves:
                    verdict = _judge(out, leaf, dims)
                    if verdict is None:
                        continue
                    record.judged = True
                    if not record.point:
                        record.point, record.batch = where, verdict.batch
                    if verdict.mixed and (found is None or verdict.reached > found[0].reached):
                        found = (verdict, leaf, where)
            if not record.judged:
                record.note = UNMATCHED
                return
            if found is None:
                return
            verdict, leaf, where = found
            record.mixed = True
            record.point, record.batch, record.row = where, verdict.batch, verdict.row
            record.reached, record.pairs = verdict.reached, verdict.pairs
            del output, outs
            _locate_start(model, args2, kwargs2, ids, leaves, leaf, verdict.dim, record, key_of, locate, names)
            if _graph_given((args2, kwargs2), leaf, verdict.batch):
                record.by_design = GRAPH
    except Exception as exc:   # the probe is leaky's; the user's training goes on unprobed
        record.judged = record.mixed = False
        record.note = f"the probe could not run: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _locate_start(model, args, kwargs, ids, leaves, leaf, dim, record, key_of, locate, names) -> None:
    """Run the forward once more, keeping every intermediate, and find the first whose rows
    along a dim of size N all draw on other samples."""
    where = next(w for t, w in leaves if t is leaf)
    others = {id(t) for t, _ in leaves if t is not leaf}
    size = record.batch

    def given(call_args) -> bool:
        """A square N x N operand that is not a parameter and not made from the probed
        input: an adjacency matrix (a graph given to the model)."""
        return any(a.ndim >= 2 and a.shape[-1] == a.shape[-2] == size and not isinstance(a, nn.Parameter)
                   and (id(a) in others or not a.requires_grad or a.is_sparse) for a in _tensors(call_args, 1))

    stand_ins: list = []   # the floating inputs are leaves already; an embedding makes its own again
    with _module_stack() as current:
        capture = _Capture(locate, current, given)
        with _embedding_stand_ins(model, ids, stand_ins, names), capture:
            model(*args, **kwargs)
    point = next((t for t, w in stand_ins if w == where), leaf)
    for op, t, at, module, given_matrix in capture.seen:
        if t is point or size not in t.shape:
            continue
        verdict = _judge(t, point, (dim,))
        if verdict is None or not verdict.mixed:
            continue
        record.first_op, record.first_where = op, at
        record.first_module = key_of(module) if module is not None else None
        record.first_shape = tuple(t.shape)
        record.first_time_major = getattr(module, "batch_first", None) is False
        record.first_dim = next(d for d in range(t.ndim) if t.shape[d] == size)
        record.by_design = _by_design(op, module, given_matrix, names)
        return


def _graph_given(inputs, point: Tensor, size: int) -> bool:
    """The model is given a graph over the N samples besides their features: an N x N
    adjacency (dense or sparse) or an edge list (2, E) of node indices below N. Its
    samples are nodes, and mixing along the graph (GCN, GAT) is what it is for."""
    for t in _tensors(inputs):
        if t is point or t.ndim != 2:
            continue
        if t.shape[0] == t.shape[1] == size:
            return True
        if not t.is_floating_point() and t.dtype != torch.bool and t.shape[0] == 2 and t.numel() \
                and t.layout == torch.strided and int(t.max()) < size:
            return True
    return False


def _by_design(op: str, module: nn.Module | None, given_matrix: bool, names: dict) -> str | None:
    if ops.over_batch(op) or isinstance(module, _BatchNorm):
        return BATCHNORM_NO_STATS   # in eval mode still on batch statistics: track_running_stats=False
    if given_matrix:
        return GRAPH
    if module is not None and _ROUTER.search(f"{type(module).__name__} {names.get(id(module), '')}"):
        return ROUTER
    return None
