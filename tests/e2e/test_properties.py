"""Property tests: random small architectures, trained for a few steps under leaky.audit().

Each example draws a spec (depth, widths, activation, residuals, normalisation, clamp/where,
an optional recurrence, init, loss, optimizer), builds the model from it and checks that

  a) the audit never crashes and its report serialises to strict JSON;
  b) every recorded per-layer gradient equals torch.autograd.grad on an identical copy;
  c) healthy, well-initialised models produce no ERROR finding.

Runtime is bounded by small models (width <= 24, batch <= 32, <= 8 time steps), few steps
(1, 3 or 5) and a fixed number of examples per property (LEAKY_PROPERTY_EXAMPLES scales it
for a longer local search).
"""
from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st
from torch import nn

import leaky
from tests.conftest import no_leaky_left

ACTIVATIONS = ("relu", "leaky_relu", "gelu", "tanh", "sigmoid", "silu")
RELU_FAMILY = ("relu", "leaky_relu", "gelu", "silu")

_SCALE = float(os.environ.get("LEAKY_PROPERTY_EXAMPLES", "1"))


def _examples(n: int) -> int:
    return max(1, int(n * _SCALE))


def _settings(n: int):
    return settings(max_examples=_examples(n), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


# -- the spec -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    depth: int
    widths: tuple[int, ...]
    act: str
    residual: bool
    norm: str | None             # None | "layer" | "batch"
    clamp: float | None          # torch.clamp(h, -c, c) after the activation
    where: bool                  # torch.where(h > 0, h, 0.1 * h) after the activation
    rec: str | None              # None | "rnn" | "gru" | "loop"
    rec_hidden: int
    rec_steps: int
    rec_factor: float            # the loop's W_hh = orthogonal * factor
    init: str                    # "default" | "fan" (Kaiming for relu-family, Xavier for tanh/sigmoid)
    batch: int
    d_in: int
    d_out: int
    loss: str                    # "ce" | "mse"
    opt: str                     # "sgd" | "adam"
    lr: float
    seed: int


@st.composite
def specs(draw, healthy: bool = False) -> Spec:
    depth = draw(st.integers(1, 4 if healthy else 5))
    if draw(st.booleans()):      # one width throughout, so residual connections apply
        widths = (draw(st.integers(4, 24)),) * depth
    else:
        widths = tuple(draw(st.lists(st.integers(4, 24), min_size=depth, max_size=depth)))
    rec = draw(st.sampled_from((None, None, "rnn", "gru", "loop")))
    return Spec(
        depth=depth,
        widths=widths,
        act=draw(st.sampled_from(ACTIVATIONS)),
        residual=draw(st.booleans()),
        norm=draw(st.sampled_from((None, "layer", "batch"))),
        clamp=None if healthy or not draw(st.booleans()) else draw(st.floats(5.0, 50.0)),
        where=False if healthy else draw(st.booleans()),
        rec=rec,
        rec_hidden=draw(st.integers(4, 12)),
        rec_steps=draw(st.integers(3, 8)),
        rec_factor=draw(st.floats(0.5, 1.0)),
        init="fan" if healthy else draw(st.sampled_from(("default", "fan"))),
        batch=32 if healthy else draw(st.integers(8, 32)),
        d_in=draw(st.integers(2, 12)),
        d_out=draw(st.integers(2, 6)),
        loss=draw(st.sampled_from(("ce", "mse"))),
        opt="adam" if healthy else draw(st.sampled_from(("sgd", "adam"))),
        lr=1e-3 if healthy else draw(st.floats(1e-3, 1e-2)),
        seed=draw(st.integers(0, 2 ** 31 - 1)),
    )


# -- the model --------------------------------------------------------------------------------
def _activate(name: str, z: torch.Tensor) -> torch.Tensor:
    if name == "relu":
        return F.relu(z)
    if name == "leaky_relu":
        return F.leaky_relu(z, 0.01)
    if name == "gelu":
        return F.gelu(z)
    if name == "tanh":
        return torch.tanh(z)
    if name == "sigmoid":
        return torch.sigmoid(z)
    return F.silu(z)


def _fan_init(layer: nn.Linear, act: str | None) -> None:
    if act in ("relu", "gelu", "silu"):
        nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    elif act == "leaky_relu":
        nn.init.kaiming_normal_(layer.weight, a=0.01, nonlinearity="leaky_relu")
    elif act == "tanh":
        nn.init.xavier_normal_(layer.weight, gain=nn.init.calculate_gain("tanh"))
    else:                        # sigmoid, and the linear head
        nn.init.xavier_normal_(layer.weight)
    nn.init.zeros_(layer.bias)


class Net(nn.Module):
    def __init__(self, spec: Spec):
        super().__init__()
        self.spec = spec
        width = spec.d_in
        self.rnn = None
        if spec.rec in ("rnn", "gru"):
            cls = nn.RNN if spec.rec == "rnn" else nn.GRU
            self.rnn = cls(spec.d_in, spec.rec_hidden, batch_first=True)
            width = spec.rec_hidden
        elif spec.rec == "loop":
            self.w_ih = nn.Parameter(torch.randn(spec.d_in, spec.rec_hidden) / math.sqrt(spec.d_in))
            q, _ = torch.linalg.qr(torch.randn(spec.rec_hidden, spec.rec_hidden))
            self.w_hh = nn.Parameter(q * spec.rec_factor)
            width = spec.rec_hidden
        self.layers = nn.ModuleList()
        self.norms = nn.ModuleList()
        for w in spec.widths:
            layer = nn.Linear(width, w)
            if spec.init == "fan":
                _fan_init(layer, spec.act)
            self.layers.append(layer)
            if spec.norm == "layer":
                self.norms.append(nn.LayerNorm(w))
            elif spec.norm == "batch":
                self.norms.append(nn.BatchNorm1d(w))
            width = w
        self.head = nn.Linear(width, spec.d_out)
        if spec.init == "fan":
            _fan_init(self.head, None)

    def forward(self, x):
        spec = self.spec
        if self.rnn is not None:
            out, _ = self.rnn(x)
            h = out[:, -1]
        elif spec.rec == "loop":
            h = x.new_zeros(x.shape[0], spec.rec_hidden)
            for t in range(x.shape[1]):
                h = torch.tanh(x[:, t] @ self.w_ih + h @ self.w_hh)
        else:
            h = x
        for i, layer in enumerate(self.layers):
            a = layer(h)
            if spec.norm is not None:
                a = self.norms[i](a)
            a = _activate(spec.act, a)
            if spec.clamp is not None:
                a = torch.clamp(a, -spec.clamp, spec.clamp)
            if spec.where:
                a = torch.where(a > 0, a, 0.1 * a)
            if spec.residual and a.shape == h.shape:
                a = a + h
            h = a
        return self.head(h)


def _standardise(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(dim=0)) / x.std(dim=0)


def build(spec: Spec):
    """Model, optimizer, inputs, targets and loss function for one spec (seeded by it)."""
    torch.manual_seed(spec.seed)
    model = Net(spec)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=spec.lr) if spec.opt == "adam" else torch.optim.SGD(params, lr=spec.lr)
    shape = (spec.batch, spec.rec_steps, spec.d_in) if spec.rec else (spec.batch, spec.d_in)
    x = _standardise(torch.randn(*shape))
    if spec.loss == "ce":
        y = torch.randint(0, spec.d_out, (spec.batch,))
        loss_fn = F.cross_entropy
    else:
        y = _standardise(torch.randn(spec.batch, spec.d_out))
        loss_fn = F.mse_loss
    return model, opt, x, y, loss_fn


def train(model, opt, x, y, loss_fn, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()


def _linears(model: nn.Module) -> dict[str, nn.Linear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}


# -- a) the audit never crashes ---------------------------------------------------------------
@_settings(40)
@given(spec=specs())
def test_audit_never_crashes(spec):
    note(repr(spec))
    model, opt, x, y, loss_fn = build(spec)
    with leaky.audit() as audit:
        train(model, opt, x, y, loss_fn, steps=3)
    assert no_leaky_left() == []
    report = audit.report
    assert report.run["internal_error"] is None
    assert report.run["steps"] == 3
    as_dict = report.to_dict()
    text = report.to_json()
    assert json.loads(text) == as_dict
    json.dumps(as_dict, allow_nan=False)      # strict JSON: no NaN/Infinity literals
    assert str(report)                        # the terminal rendering
    for finding in report.findings:
        assert finding.severity.value in ("error", "warning", "info")
        assert finding.code.startswith("LK")


# -- b) recorded gradients equal autograd -----------------------------------------------------
def _reference(model: nn.Module, x, y, loss_fn):
    """Gradient norms at each Linear's output and at each parameter, from autograd alone."""
    outputs: dict[str, torch.Tensor] = {}
    handles = [m.register_forward_hook(lambda mod, inp, out, name=name: outputs.__setitem__(name, out))
               for name, m in _linears(model).items()]
    try:
        loss = loss_fn(model(x), y)
    finally:
        for handle in handles:
            handle.remove()
    names = list(outputs)
    params = [(n, p) for n, p in model.named_parameters()]
    grads = torch.autograd.grad(loss, [outputs[n] for n in names] + [p for _, p in params], allow_unused=True)
    at_output = {n: g.norm().item() for n, g in zip(names, grads[:len(names)])}
    at_param = {n: None if g is None else g.norm().item() for (n, _), g in zip(params, grads[len(names):])}
    return at_output, at_param


def _close(got: float | None, want: float) -> bool:
    if want == 0.0:
        return got is None or got == 0.0    # a zero gradient has no geometric mean
    return got is not None and math.isclose(got, want, rel_tol=1e-4)


@_settings(40)
@given(spec=specs())
def test_recorded_gradients_equal_autograd(spec):
    note(repr(spec))
    model, opt, x, y, loss_fn = build(spec)
    want_out, want_param = _reference(copy.deepcopy(model), x, y, loss_fn)

    seqs: dict[str, int] = {}
    handles = [m.register_forward_hook(lambda mod, inp, out, name=name: seqs.__setitem__(name, out.grad_fn._sequence_nr()))
               for name, m in _linears(model).items()]
    try:
        with leaky.audit() as audit:
            train(model, opt, x, y, loss_fn, steps=1)
    finally:
        for handle in handles:
            handle.remove()
    stats = audit.stats
    assert stats.steps == 1
    by_seq = {op.first_seq: op for op in stats.ops}
    assert set(seqs) == set(want_out)
    for name, seq in seqs.items():        # every Linear here runs once per forward
        op = by_seq.get(seq)
        assert op is not None, (name, [(o.op, o.node, o.module, o.first_seq) for o in stats.ops])
        assert (op.op, op.module, op.steps, op.occurrences) == ("linear", name, 1, 1.0)
        assert _close(op.grad_in, want_out[name]), (name, op.grad_in, want_out[name])

    got_param = {p.name: p.grad_norm for p in stats.params}
    for name, layer in _linears(model).items():
        for pname, _ in layer.named_parameters():
            full = f"{name}.{pname}"
            assert full in got_param, (full, sorted(got_param))
            assert _close(got_param[full], want_param[full]), (full, got_param[full], want_param[full])


# -- c) healthy models: no errors -------------------------------------------------------------
@_settings(40)
@given(spec=specs(healthy=True))
def test_healthy_models_have_no_errors(spec):
    note(repr(spec))
    model, opt, x, y, loss_fn = build(spec)
    with leaky.audit() as audit:
        train(model, opt, x, y, loss_fn, steps=5)
    errors = [f for f in audit.report.findings if f.severity.value == "error"]
    assert errors == [], "\n".join(f"{f.code} {f.name} at {f.where}: {f.message}" for f in errors)


# -- the per-unit counters ---------------------------------------------------------------------
@st.composite
def _maps(draw):
    """A feature map, the dims summed away, and its dtype; some elements 0, -0.0, NaN or inf."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    unit_dim = draw(st.integers(0, len(shape) - 1))
    dtype = draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 31 - 1)))
    x = torch.randn(shape, generator=gen)
    specials = torch.tensor([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-30])
    mask = torch.rand(shape, generator=gen) < draw(st.sampled_from([0.0, 0.3, 0.9]))
    picks = specials[torch.randint(0, len(specials), shape, generator=gen)]
    x = torch.where(mask, picks, x).to(dtype)
    return x, [d for d in range(len(shape)) if d != unit_dim]


@_settings(200)
@given(_maps(), st.booleans())
def test_unit_counts_equal_a_boolean_count(drawn, relu):
    """count_positive (summed signs) equals (x > 0).sum per unit, NaN, inf and -0.0 included."""
    from leaky.record.activations import count_positive, positive_counts

    x, dims = drawn
    if relu:
        x = torch.relu(x)
    per_unit = x.numel() // max(1, math.prod(x.shape[d] for d in range(x.ndim) if d not in dims))
    got = count_positive(x, dims, per_unit, nonnegative=relu)
    if not dims:   # an unbatched vector: one sample per unit
        assert torch.equal(got, (x > 0).long())
        return
    want = (x > 0).sum(dims)
    assert got.dtype == torch.int64
    assert torch.equal(got, want), (got, want)
    raw = positive_counts(x, dims, per_unit, nonnegative=relu)   # what UnitStats sums: no NaN, no cast
    assert not raw.isnan().any() and torch.equal(raw.long(), want)


def test_sign_of_nan_is_zero_on_the_cpu():
    """positive_counts skips its NaN pass on the CPU because torch.sign(NaN) is 0 there."""
    assert torch.sign(torch.tensor([math.nan, -math.nan])).tolist() == [0.0, 0.0]


def test_fire_counts_folded_at_the_step_end_equal_counting_each_call():
    """UnitStats keeps a step's per-call ReLU counts and settle_units folds them for every
    site at once: the totals and the last step each unit fired are those of counting every
    call, also past PENDING_LIMIT calls in one step (a loop over time), and a site whose
    pending step is older is folded before a new step's count is kept."""
    from leaky import ops
    from leaky.record.activations import PENDING_LIMIT, UnitStats, settle_units

    def stats():
        return UnitStats(ops.activation("relu"), 3, 1, {"flat_share": 0.01, "peaked_row": 0.99})

    x, late = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]]), torch.tensor([[0.0, 0.0, 1.0]])
    a, b = stats(), stats()
    calls = {0: 1, 1: PENDING_LIMIT + 3, 2: 1}
    for step, n in calls.items():
        for _ in range(n):
            a.update(late if step == 2 else x, step)
            b.update(late if step == 2 else x, step)
        settle_units([a])   # b is never settled by hand: its next step's first call folds it
    want_active = [1 + calls[1], 0, 2 * (1 + calls[1]) + 1]
    assert a.active.tolist() == want_active and a.last_active.tolist() == [1, -1, 2]
    settle_units([b])
    assert b.active.tolist() == want_active and b.last_active.tolist() == [1, -1, 2]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(0, 5000), st.sampled_from(["tanh", "sigmoid"]), st.floats(0.0, 30.0))
def test_log_histogram_equals_histc(seed, n, name, scale):
    """activations.log_histogram bins the logs of local-derivative shares as torch.histc does,
    bin for bin: random shares (saturated ones included, some exactly 0, NaN among them) and
    every bin edge, with the float32 values on either side of it."""
    from leaky import ops
    from leaky.record.activations import HIST_BINS, HIST_LOW, log_histogram

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen) * scale
    x[torch.rand(n, generator=gen) < 0.05] = math.nan
    share = ops.activation(name).derivative_share(torch.tanh(x) if name == "tanh" else torch.sigmoid(x))
    edges = torch.linspace(HIST_LOW, 0.0, HIST_BINS + 1)
    near = torch.cat([edges, torch.nextafter(edges, edges - 1), torch.nextafter(edges, edges + 1)])
    shares = torch.cat([share, 10.0 ** near, torch.tensor([0.0, 1.0, 1e-30, 10.0 ** HIST_LOW])])
    for logs in (torch.log10(shares.clamp_min(10.0 ** HIST_LOW)), near.clamp(HIST_LOW, 0.0)):
        want = torch.histc(logs, bins=HIST_BINS, min=HIST_LOW, max=0.0)
        got = log_histogram(logs)
        assert got.dtype == want.dtype and torch.equal(got, want), (got - want).nonzero()


@_settings(60)
@given(st.integers(0, 2**31 - 1),
       st.lists(st.tuples(st.sampled_from([(4, 3), (2, 5, 3), (3,), (2, 3, 4, 4)]), st.sampled_from(["relu", "threshold"]),
                          st.sampled_from([torch.float32, torch.bfloat16, torch.float64])), min_size=1, max_size=4),
       st.lists(st.lists(st.integers(0, 20), min_size=4, max_size=4), min_size=1, max_size=3),
       st.booleans())
@example(0, [((4, 3), "relu", torch.float32)] * 2, [[17, 1, 0, 0], [16, 0, 0, 0]], True)   # PENDING_LIMIT calls of a site
def test_fire_counts_of_held_outputs_equal_counting_each_call(seed, sites, steps, midway):
    """Small ReLU outputs are kept and their fire counts taken stacked across sites
    (count_held, at a backward's start or the step's end): each site's totals, last step
    fired and counted samples equal counting every call on its own (count_positive), with
    NaN, inf and -0.0 in the outputs, past PENDING_LIMIT calls, across steps, shapes, unit
    dims and dtypes; an output written in place after its call is left out of both its
    counts and its counted samples."""
    from leaky import ops
    from leaky.record.activations import HOLD_BELOW, UnitStats, count_held, count_positive, settle_units
    from leaky.record.reduce import other_dims

    gen = torch.Generator().manual_seed(seed)
    specials = torch.tensor([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-30])
    detail = {"flat_share": 0.01, "peaked_row": 0.99}
    unit_dims = [1 if len(shape) >= 3 and i % 2 else len(shape) - 1 for i, (shape, _, _) in enumerate(sites)]
    all_stats = [UnitStats(ops.activation(name), shape[dim], dim, dict(detail))
                 for (shape, name, _), dim in zip(sites, unit_dims)]
    want = [torch.zeros(shape[dim], dtype=torch.float64) for (shape, _, _), dim in zip(sites, unit_dims)]
    last = [torch.full((shape[dim],), -1.0, dtype=torch.float64) for (shape, _, _), dim in zip(sites, unit_dims)]
    counted = [0] * len(sites)
    written_once = False
    for step, calls in enumerate(steps):
        for i, ((shape, name, dtype), dim, stats) in enumerate(zip(sites, unit_dims, all_stats)):
            fn = torch.relu if name == "relu" else (lambda t: torch.threshold(t, 0.0, -1.0))
            for call in range(calls[i % len(calls)]):
                x = torch.randn(shape, generator=gen)
                x = torch.where(torch.rand(shape, generator=gen) < 0.3,
                                specials[torch.randint(0, len(specials), shape, generator=gen)], x)
                out = fn(x).to(dtype)
                assert out.numel() < HOLD_BELOW
                stats.update(out, step)
                if not written_once and call == 1:
                    out.mul_(-1.0)   # after its call: its values are gone, it is left out
                    written_once = True
                    continue
                fired = count_positive(out, other_dims(out.ndim, dim), out.numel() // shape[dim],
                                       nonnegative=name == "relu").double()
                want[i] += fired
                last[i] = torch.where(fired > 0, float(step), last[i])
                counted[i] += out.numel() // shape[dim]
            if midway and i == 0:
                count_held(all_stats)   # a backward starts between two sites' calls
        if step % 2 == 0:
            settle_units(all_stats)   # an odd step is left unsettled until the next step's calls
    settle_units(all_stats)
    for i, stats in enumerate(all_stats):
        assert stats.counted == counted[i] and not stats.held
        if stats.active is None:
            assert not want[i].any()
            continue
        assert torch.equal(stats.active, want[i]), (i, stats.active, want[i])
        assert torch.equal(stats.last_active, last[i]), (i, stats.last_active, last[i])


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(["tanh", "sigmoid"]), st.lists(st.integers(1, 24), min_size=1,
                                                                                  max_size=3))
@example(0, "tanh", [15])            # PENDING_LIMIT - 1 calls after the written one: a fold at the last
@example(1, "sigmoid", [16, 16, 1])  # folds at PENDING_LIMIT, the written output in the first
def test_saturation_folded_from_kept_outputs_equals_folding_each_call(seed, name, calls):
    """A sigmoid's or tanh's outputs are kept for the step and their shares folded stacked
    (UnitStats.fold_outputs): the histogram and the per-unit flat counts equal folding each
    call on its own, bit for bit, past PENDING_LIMIT calls, across steps, shapes and a
    step left unsettled; an output written in place after its call is left out."""
    from leaky import ops
    from leaky.record.activations import UnitStats, settle_units

    gen = torch.Generator().manual_seed(seed)
    detail = {"flat_share": 0.05, "peaked_row": 0.99}
    kept, each = (UnitStats(ops.activation(name), 5, 1, dict(detail)) for _ in range(2))
    for step, n in enumerate(calls):
        rows = 1 + step % 2   # another shape each step
        fn = torch.tanh if name == "tanh" else torch.sigmoid
        if step == 0:
            # first, so that it is still kept when written (a step's PENDING_LIMIT-th kept
            # output is folded at its call, before any later write)
            written = fn(torch.randn(3, 5, generator=gen))
            kept.update(written, step)
            written.mul_(0.5)   # after its call: its shares are gone, it is left out
        for _ in range(n):
            x = fn(torch.randn(rows * 3, 5, generator=gen) * 4)
            kept.update(x, step)
            each._count_flat(each._share_margin(x), [0], x.shape[0])
        if step % 2:
            settle_units([kept])   # other steps stay unsettled until the next step's first call
    settle_units([kept])
    assert torch.equal(kept.hist, each.hist) and torch.equal(kept.flat, each.flat)
    assert kept.hist.sum() == sum(15 * (1 + step % 2) * n for step, n in enumerate(calls)) and not kept.outputs


_FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-6, torch.float16: 1e-4, torch.bfloat16: 1e-4}   # a float32 result


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(_FLOATS),
       st.lists(st.sampled_from([(1,), (7,), (64,), (64, 64), (3, 5, 7), (70000,), (300, 300), (0,)]),
                min_size=1, max_size=12))
def test_a_watchs_total_gradient_norm_equals_the_norm_of_all_values(seed, dtype, shapes):
    """The every-step gradient norm (distributed.total_norm: the small gradients copied into one
    buffer on the CPU, the large ones normed alone) is the 2-norm of all their values together,
    as float32, in every float dtype, with or without small or large ones; None for a mix of dtypes."""
    from leaky.process.distributed import total_norm

    gen = torch.Generator().manual_seed(seed)
    grads = [torch.randn(shape, generator=gen).to(dtype) * 10 ** (i % 3) for i, shape in enumerate(shapes)]
    want = torch.linalg.vector_norm(torch.cat([g.double().reshape(-1) for g in grads]))
    got = total_norm(grads)
    assert got.dtype == torch.float32 and got.ndim == 0
    assert math.isclose(float(got), float(want), rel_tol=_TOLERANCE[dtype], abs_tol=1e-30)
    assert total_norm(grads + [torch.ones(3, dtype=torch.float64 if dtype != torch.float64 else torch.float32)]) is None


def test_present_grads_skips_missing_and_meta_gradients_and_takes_a_sparse_ones_values():
    from leaky.record.monitor import present_grads

    dense, unset, sparse = (nn.Parameter(torch.randn(4, 3)) for _ in range(3))
    meta = nn.Parameter(torch.empty(4, 3, device="meta"))
    dense.grad = torch.randn(4, 3)
    meta.grad = torch.empty(4, 3, device="meta")
    sparse.grad = torch.sparse_coo_tensor([[0, 2]], [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], (4, 3), check_invariants=True)
    opt = torch.optim.SGD([{"params": [dense, unset]}, {"params": [meta, sparse]}], lr=0.1)
    got = present_grads(opt)
    assert len(got) == 2 and got[0] is dense.grad
    assert torch.equal(got[1], sparse.grad.coalesce().values())
    assert present_grads(torch.optim.SGD([dense], lr=0.1)) == [dense.grad]


def _spike_by_sorting(rows, factor, min_history):
    """LK104's spike rule written plainly: the median of the earlier finite norms, per step."""
    import statistics
    for index in range(min_history, len(rows)):
        step, norm = rows[index]
        history = [n for _, n in rows[:index] if math.isfinite(n)]
        if len(history) < min_history or not math.isfinite(norm):
            continue
        median = statistics.median(history)
        if median > 0 and norm > factor * median:
            return step, norm, median
    return None


_NORMS = st.one_of(st.floats(0, 1e6, allow_nan=False), st.sampled_from([0.0, 1.0, math.inf, math.nan, 1e30]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_NORMS, max_size=60), st.sampled_from([2.0, 100.0]), st.integers(1, 5))
def test_lk104_spike_median_from_two_heaps_equals_sorting(norms, factor, min_history):
    """LK104's spike (exploding_gradient._spike) keeps the earlier steps' median in two heaps:
    the step, the norm and the median it reports are those of sorting the history at each step."""
    from leaky.checks import exploding_gradient
    from leaky.config import AuditConfig
    from leaky.stats import SeriesRow

    rows = [(3 * i, n) for i, n in enumerate(norms)]
    stats = type("Stats", (), {"series": [SeriesRow(step, 1.0, n, 0.1) for step, n in rows]})()
    finding = exploding_gradient._spike(stats, AuditConfig(spike_factor=factor, spike_min_history=min_history))
    want = _spike_by_sorting(rows, factor, min_history)
    if want is None:
        assert finding is None
    else:
        assert (finding.step, finding.evidence["grad_norm"], finding.evidence["median_before"]) == want


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 2), st.integers(0, 2), st.integers(0, 2), st.booleans(),
                          st.booleans(), st.integers(1, 10**6), st.floats(1e-30, 1e30)),
                min_size=0, max_size=40),
       st.randoms(use_true_random=False))
def test_per_site_sums_equal_adding_each_hook_call(calls, rng):
    """StepFolder._per_site combines a step's hook calls per site in numpy, all records at
    once: the same sums to the last bit, flags, counts and sorted profile as adding the
    calls one at a time in their order (the loop it replaced), for sites called many times
    and once, counted and low-precision records among them."""
    import numpy as np
    from leaky.derive.accumulate import StepFolder
    from leaky.record.step_record import HostStep, NodeRecord

    records, values = [], []
    for site, n_in, n_act, n_param, counted, half, numel, scale in calls:
        offset = len(values)
        values += [rng.uniform(0, scale) for _ in range(n_in + n_act + n_param)]
        if counted:
            values += [float(rng.randint(0, numel)), float(rng.randint(0, numel))]
        if half:
            values += [float(rng.randint(0, numel)), float(rng.randint(0, numel))]
        records.append(NodeRecord(site, rng.randint(0, 10**6), offset, n_in, n_act, n_param, counted, numel, half))
    host = HostStep(np.array(values, dtype=np.float64), records, [], np.zeros(0), {}, [])
    got = StepFolder(None)._per_site(host)

    want: dict = {}
    for rec in records:
        v = host.values
        at = rec.offset
        sq = [sum(x * x for x in v[at:at + rec.n_in]), sum(x * x for x in v[at + rec.n_in:at + rec.n_in + rec.n_act]),
              sum(x * x for x in v[at + rec.n_in + rec.n_act:at + rec.n_in + rec.n_act + rec.n_param])]
        w = want.setdefault(rec.site, dict(sq=[0.0, 0.0, 0.0], occ=0, acts=False, params=False, profile=[],
                                           nonzero=0.0, zeroed=0.0, counted=False, hz=0.0, hs=0.0, hn=0))
        w["sq"] = [a + b for a, b in zip(w["sq"], sq)]
        w["occ"] += 1
        w["acts"] |= rec.n_act > 0
        w["params"] |= rec.n_param > 0
        w["profile"].append((rec.seq, math.sqrt(sq[0])))
        counts, halves = host.nonzero_counts(rec), host.low_precision_counts(rec)
        if counts is not None:
            w["nonzero"] += counts[0]
            w["zeroed"] += max(0.0, counts[0] - counts[1])
            w["counted"] = True
        if halves is not None:
            w["hz"] += halves[0]
            w["hs"] += halves[1]
            w["hn"] += rec.numel_in
    assert set(got) == set(want)
    for site, w in want.items():
        g = got[site]
        assert [g.squared_in, g.squared_out, g.squared_param] == w["sq"], site
        assert (g.occurrences, g.sends_to_activations, g.sends_to_params) == (w["occ"], w["acts"], w["params"])
        assert (g.nonzero_in, g.zeroed, g.counted) == (w["nonzero"], w["zeroed"], w["counted"])
        assert (g.half_zero, g.half_subnormal, g.half_numel) == (w["hz"], w["hs"], w["hn"])
        assert g.profile == (sorted(w["profile"]) if w["occ"] > 1 else [])
