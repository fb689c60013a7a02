"""LK306's probe: does the model's output for one sample depend on other samples?

Once per root model, for its first call that builds a graph (in an audit, or on a
watch's sampled steps: its first step, at any `every`), the forward
runs again on a copy of the same inputs, at the end of that step (the step's own graph
is gone by then), and backprop charts the dependencies. For one output
row i (a random cotangent on it), the gradient with respect to the whole input batch must
be zero in every row j != i: a per-sample model has no path from x_j to y_i. The test is
exact: a path that does not exist sends exactly 0 (0 · w sums to 0), whatever the weights.

Which dim is the batch? Dim 0 of the input (a DataLoader's collate, batch_first). It is
paired with every output dim of the same size N >= 2, and rows 0 and N - 1 are read (the
last row of a time dim draws on all earlier steps, so a time dim never passes for a batch
dim). The model is per-sample if one such pair keeps both rows apart. If dim 0 mixes only
causally (row 0 depends on no other row, as h_0 sees x_0 alone: a hand-written time-major
recurrence), or the model has a time-major module (batch_first=False), dim 1 is judged as
the batch too, and decides (see _judge).
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
hooks off and what `forward` writes on its modules put back (record/rerun.py), and with
none of leaky's instruments on (Recorder.left_out).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor, nn
from torch.nn.modules import module as module_globals
from torch.nn.modules.batchnorm import _BatchNorm

from leaky import ops
from leaky.process.modes import CallMode
from leaky.record.call_args import op_name
from leaky.record.rerun import batchnorm_in_eval, buffers_kept, snapshot, untouched
from leaky.record.script_names import unwrapped_module
from leaky.stats import BATCHNORM_NO_STATS, GRAPH, ROUTER

ROOTS = 4             # root models probed per audit
TRIES = 8             # calls of one root tried while none gives a batch to compare (a batch of one)
CAPTURED = 2048       # intermediate tensors kept while looking for where the mixing starts
UNMATCHED = "no dim of the output of size 2 or more has the size of the input's batch dim"
ONE_SAMPLE = "the loss is taken over one sample at a time (a batch of one): there is no batch to mix"
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
    pairs: int = 0                      # (input dim, output dim) pairs of size N related, all mixing
    first_op: str | None = None
    first_module: int | None = None
    first_where: tuple | None = None
    first_dim: int | None = None
    first_shape: tuple[int, ...] | None = None
    first_time_major: bool = False      # that module reads (T, B, ...): batch_first=False
    by_design: str | None = None        # BATCHNORM_NO_STATS | GRAPH | ROUTER
    batchnorm_eval: tuple[int, ...] = ()   # modules probed in eval mode


class BatchMixing:
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
        self._skipped: set[int] = set()   # roots without parameters: never probed, not looked at again
        self._loss_rows: set[int] = set()   # this step's losses: the rows each averages over

    def after_call(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if len(self._seen) >= ROOTS or id(module) in self._seen or id(module) in self._skipped \
                or any(p[0] is module for p in self._pending):
            return
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
            return   # an evaluation: the model's training call comes later
        if not any(t.requires_grad for t in _tensors(output) if t.is_floating_point()):
            return
        if next(module.parameters(), None) is None:
            self._skipped.add(id(module))
            return   # a loss module (nn.CrossEntropyLoss()): it reduces the batch by design
        if type(module).__name__ == "FullyShardedDataParallel":
            self._skipped.add(id(module))
            # FSDP1: its forward gathers the shards and its backward reduce-scatters, and no
            # inner module runs without them: a probe's extra pass left its flat parameter's
            # views stale, and the script's next forward failed
            return
        inner = unwrapped_module(module)
        dims = self._dims.get(id(module))
        if dims is None:
            dims = self._dims[id(module)] = _batch_dims(inner)
        if not any(t.ndim > d and t.shape[d] >= 2 for t in _tensors((args, kwargs or {})) for d in dims):
            return   # a batch of one (a DQN acting on one observation): probe a later call
        self._pending.append((module, inner, dims, snapshot(args), snapshot(kwargs or {})))

    def note_loss(self, x: Any) -> None:
        """A loss call while a model call waits: the rows it averages over (its input's dim 0),
        the evidence of how large a batch is (see _admissible)."""
        if isinstance(x, Tensor) and x.ndim >= 1:
            self._loss_rows.add(int(x.shape[0]))

    @property
    def waiting(self) -> bool:
        """A model call is noted and waits for its step's end."""
        return bool(self._pending)

    def run_pending(self) -> None:
        """Probe the calls noted during the step that just ended."""
        pending, self._pending = self._pending, []
        rows, self._loss_rows = self._loss_rows, set()
        for module, inner, dims, args, kwargs in pending:
            tries = self._tries[id(module)] = self._tries.get(id(module), 0) + 1
            record = MixingRecord(self.key_of(module))
            if rows and max(rows) == 1:
                record.note = ONE_SAMPLE   # nothing to mix; the probe need not run
            else:
                with self.left_out():
                    _probe(inner, args, kwargs, dims, record, self.key_of, self.locate, _admissible(rows))
            if record.note in (UNMATCHED, ONE_SAMPLE) and tries < TRIES:
                continue   # no output dim matched, or a batch of one: maybe a later call's will
            self._seen.add(id(module))
            self.records.append(record)


def _admissible(rows: set[int]) -> Callable[[int], bool]:
    """Which sizes a batch dim can have, by the step's losses: a loss averages over the
    batch's rows, over batch × time once flattened (B·T), or over a part of the batch (the
    first half of a contrastive pair, z.chunk(2)), so a batch of N rows divides the rows of
    some loss, or they divide N. A loss over one row is a batch of one (a seq2seq model
    trained one pair at a time: run_pending probes nothing then): its hidden size is no
    batch. No loss seen: any size."""
    rows = {r for r in rows if r > 1}
    if not rows:
        return lambda size: True
    return lambda size: any(r % size == 0 or size % r == 0 for r in rows)


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
    dim: int = 0         # the point's dim judged as the batch
    causal: bool = False  # mixed, but row 0 depends on no other row: the mark of a time dim


def _judge_dim(out: Tensor, point: Tensor, pd: int, admissible: Callable[[int], bool] = lambda size: True
               ) -> _Verdict | None:
    """The point's dim `pd` against every output dim of its size N >= 2, at rows 0 and
    N - 1: clean if one pair keeps both rows apart; else mixed, and causal when row 0 of
    every related pair depends on no other row (a recurrence over time: h_t sees x_<=t).
    None when no pair relates them, or the dim's size cannot be the batch's (admissible)."""
    if pd >= point.ndim or not admissible(point.shape[pd]):
        return None
    pairs = sorted(((pd, od) for od in range(out.ndim) if point.shape[pd] == out.shape[od] >= 2),
                   key=lambda p: (p[0] != p[1], p))   # same position first: (0, 0) is the usual batch
    worst: _Verdict | None = None
    related, causal = 0, True
    for _, od in pairs:
        size = out.shape[od]
        reaches = [(_reach(out, od, row, point, pd), row) for row in (0, size - 1)]
        seen = [(r, row) for r, row in reaches if r is not None]
        if not seen:
            continue
        related += 1
        if all(r == 0 for r, _ in seen):
            return _Verdict(False, size, 0, 0, related, pd)
        causal = causal and reaches[0][0] == 0
        reached, row = max(seen)
        if worst is None or reached > worst.reached:
            worst = _Verdict(True, size, row, reached, 0, pd)
    if worst is not None:
        worst.pairs, worst.causal = related, causal
    return worst


def _judge(out: Tensor, point: Tensor, time_major: bool, admissible: Callable[[int], bool] = lambda size: True
           ) -> _Verdict | None:
    """Mixed iff the batch dim of the input mixes. The batch is dim 0, unless dim 0 mixes
    only causally (a time dim: a hand-written time-major recurrence) or the model has a
    time-major module: then dim 1 is judged as the batch too. Dim 1 decides when it keeps
    its rows apart (a time-major model), when dim 0 is a time dim (causal), or when dim 0
    cannot be the batch; when both mix and dim 0 is no time dim, dim 0 is the batch that
    mixes (a `view` that scattered a batch-first input over time: the batch is its B)."""
    first = _judge_dim(out, point, 0, admissible)
    if first is not None and not first.mixed:
        return first
    if (first is not None and first.causal) or time_major:
        second = _judge_dim(out, point, 1, admissible)
        if second is not None and (first is None or first.causal or not second.mixed):
            return second
    return first


def _batch_dims(model: nn.Module) -> tuple[int, ...]:
    """Where the batch can be in an input: dim 0 (a DataLoader's collate, batch_first), or
    also dim 1 in a model with a time-major module (nn.LSTM, nn.MultiheadAttention,
    nn.TransformerEncoderLayer with batch_first=False: its inputs are (T, B, ...)).

    NOTE: which dim is the batch cannot be read from the dependencies alone: a model that
    mixes dim 0 and keeps dim 1 apart is either time-major and per-sample, or batch-first
    and mixing. Only a time-major module makes the first reading plausible."""
    return (0, 1) if _time_major(model) else (0,)


def _time_major(model: nn.Module) -> bool:
    return any(getattr(m, "batch_first", None) is False for m in model.modules())


class _Capture(CallMode):
    """Keeps each op's floating outputs that are on the graph, with where it ran."""

    def __init__(self, locate: Callable, current: Callable[[], nn.Module | None], given: Callable) -> None:
        super().__init__(self._keep)
        self.locate, self.current, self.given = locate, current, given
        self.seen: list[tuple[str, Tensor, Any, Any, bool]] = []

    def _keep(self, func, args: tuple, kwargs: dict):
        out = func(*args, **kwargs)
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
           locate, admissible: Callable[[int], bool] = lambda size: True) -> None:
    params = list(model.parameters())
    devices = sorted({p.device.index or 0 for p in params if p.device.type == "cuda"})
    names = {id(m): path for path, m in model.named_modules()}
    try:
        with torch.random.fork_rng(devices=devices), untouched(model), batchnorm_in_eval(model) as switched, \
                buffers_kept(model), torch.enable_grad():
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
            time_major = len(dims) > 1
            for out in outs:
                for leaf, where in leaves:
                    verdict = _judge(out, leaf, time_major, admissible)
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
        verdict = _judge_dim(t, point, dim)
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
