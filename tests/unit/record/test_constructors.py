"""Property test: tensors made by every constructor and factory form torch accepts, used in
a real training step under leaky.audit(), never make leaky fail, and never change the loss.

Each example draws one call (torch.tensor, torch.as_tensor, torch.from_numpy, Tensor.new_*,
the size factories, arange/linspace/logspace/eye, the *_like functions) with one of the
argument forms torch takes for it (Python scalars, nested lists and tuples of floats, ints
and bools, lists of 0-d tensors, numpy arrays and numpy scalars; sizes as ints, a tuple, a
list, a torch.Size or `size=`; dtype, device and requires_grad keywords; 0-d to 3-d), and
one use of its result in a small training step: the model's input, the target, the
prediction, a per-sample weight, a trainable weight, or the predictions collected row by
row (`for row in x: preds.append(model(row).item())`, then rebuilt into a tensor).

The step runs twice from the same seed, once plainly and once under `leaky.audit()` with
LEAKY_STRICT=1 (conftest): any internal error of leaky fails the example, and every loss
and every final parameter must be bit-identical between the two runs.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from torch import nn

import leaky
from tests.conftest import no_leaky_left

_SCALE = float(os.environ.get("LEAKY_PROPERTY_EXAMPLES", "1"))
STEPS = 3
USES = ("input", "target", "labels", "prediction", "sample_weight", "weight", "rowwise")
_FLOATS = (torch.float32, torch.float64)
# What a prediction goes through before its loss: each is recorded per unit by leaky.
ACTIVATIONS = {
    "none": lambda t: t, "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "softmax": lambda t: torch.softmax(t, dim=-1), "log_softmax": lambda t: F.log_softmax(t, dim=-1),
    "clamp": lambda t: torch.clamp(t, -1, 1), "hardtanh": F.hardtanh, "leaky_relu": F.leaky_relu,
}
_NUMPY = {"float": np.float32, "double": np.float64, "int": np.int64, "bool": np.bool_}


# -- one constructor call, made lazily (inside the audit) ------------------------------------
@dataclass(frozen=True)
class Call:
    """A constructor call: `make()` runs it; `text` is how a script would spell it."""

    text: str
    make: Callable[[], torch.Tensor] = field(compare=False)

    def __repr__(self) -> str:
        return self.text


def _elements(kind: str):
    if kind == "float":
        return st.one_of(st.floats(-8, 8, width=32), st.sampled_from([0.0, -0.0, 1e-30, 1e30, math.inf, math.nan]))
    if kind == "int":
        return st.integers(-5, 5)
    return st.booleans()


def _nest(flat: list, shape: tuple[int, ...], as_tuple: bool):
    if not shape:
        return flat[0]
    step = len(flat) // shape[0]
    rows = [_nest(flat[i * step:(i + 1) * step], shape[1:], as_tuple) for i in range(shape[0])]
    return tuple(rows) if as_tuple else rows


# 0-d, 1-d, 2-d and 3-d equally often.
shapes = st.integers(0, 3).flatmap(lambda ndim: st.tuples(*[st.integers(1, 4)] * ndim))


@st.composite
def data_forms(draw, shape: tuple[int, ...]):
    """(text, make_data): a `data` argument of torch.tensor / as_tensor / new_tensor."""
    kind = draw(st.sampled_from(["float", "int", "bool", "mixed"]))
    count = math.prod(shape)
    element = _elements(kind) if kind != "mixed" else st.one_of(_elements("float"), _elements("int"))
    flat = draw(st.lists(element, min_size=count, max_size=count))
    forms = ["list", "tuple", "numpy"] + (["scalar", "numpy scalar"] if not shape else []) + \
        (["0-d tensors"] if len(shape) == 1 else [])
    form = draw(st.sampled_from(forms))
    if form == "scalar":
        return repr(flat[0]), lambda: flat[0]
    if form == "numpy scalar":
        np_type = np.float64 if kind in ("float", "mixed") else _NUMPY[kind]
        return f"np.{np_type.__name__}({flat[0]!r})", lambda: np_type(flat[0])
    if form == "0-d tensors":
        return f"[torch.tensor(v) for v in {flat!r}]", lambda: [torch.tensor(v) for v in flat]
    nested = _nest(flat, shape, form == "tuple")
    if form == "numpy":
        np_type = draw(st.sampled_from([np.float32, np.float64])) if kind in ("float", "mixed") else _NUMPY[kind]
        return f"np.array({nested!r}, dtype=np.{np_type.__name__})", lambda: np.array(nested, dtype=np_type)
    return repr(nested), lambda: nested


@st.composite
def options(draw, dtypes, grad: bool = True):
    """dtype, device and requires_grad keywords (requires_grad only with a float result)."""
    dtype = draw(st.sampled_from(dtypes))
    kwargs: dict[str, Any] = {}
    if dtype is not None:
        kwargs["dtype"] = dtype
    device = draw(st.sampled_from([None, "cpu", torch.device("cpu")]))
    if device is not None:
        kwargs["device"] = device
    if grad and dtype in _FLOATS and draw(st.booleans()):
        kwargs["requires_grad"] = True
    return kwargs


def _kw_text(kwargs: dict) -> str:
    return "".join(f", {k}={v!r}" if not isinstance(v, torch.dtype) else f", {k}={v}" for k, v in kwargs.items())


@st.composite
def data_calls(draw):
    shape = draw(shapes)
    text, data = draw(data_forms(shape))
    fn = draw(st.sampled_from(["tensor", "as_tensor", "new_tensor", "from_numpy"]
                              if text.startswith("np.array") else ["tensor", "as_tensor", "new_tensor"]))
    if fn == "from_numpy":
        return Call(f"torch.from_numpy({text})", lambda: torch.from_numpy(data()))
    dtypes = [None, torch.float32, torch.float64, torch.int64, torch.bool]
    kwargs = draw(options(dtypes, grad=fn != "as_tensor"))
    if kwargs.get("requires_grad") is None and "dtype" not in kwargs and fn == "tensor" and draw(st.booleans()):
        kwargs["dtype"], kwargs["requires_grad"] = torch.float32, True
    if fn == "new_tensor":
        base_dtype = draw(st.sampled_from(_FLOATS))
        return Call(f"torch.zeros(1, dtype={base_dtype}).new_tensor({text}{_kw_text(kwargs)})",
                    lambda: torch.zeros(1, dtype=base_dtype).new_tensor(data(), **kwargs))
    make = getattr(torch, fn)
    return Call(f"torch.{fn}({text}{_kw_text(kwargs)})", lambda: make(data(), **kwargs))


@st.composite
def size_forms(draw, shape: tuple[int, ...]):
    """(args, kwargs) spelling a size: ints, a tuple, a list, a torch.Size, or size=."""
    form = draw(st.sampled_from(["tuple", "list", "Size", "size="] + (["ints"] if shape else [])))
    spelled = {"ints": tuple(shape), "tuple": (tuple(shape),), "list": (list(shape),),
               "Size": (torch.Size(shape),), "size=": ()}[form]
    return spelled, ({"size": tuple(shape)} if form == "size=" else {})


@st.composite
def size_calls(draw):
    shape = draw(shapes)
    fn = draw(st.sampled_from(["zeros", "ones", "empty", "full", "rand", "randn", "randint",
                               "new_zeros", "new_ones", "new_full", "new_empty"]))
    args, size_kw = draw(size_forms(shape))
    if fn in ("rand", "randn"):
        kwargs = draw(options([None, *_FLOATS]))
    elif fn == "randint":
        kwargs = draw(options([None, torch.int64, *_FLOATS], grad=False))
    else:
        kwargs = draw(options([None, *_FLOATS, torch.int64, torch.int32, torch.bool]))
    fill = None
    if fn in ("full", "new_full"):
        dtype = kwargs.get("dtype")
        kind = "bool" if dtype is torch.bool else "int" if dtype in (torch.int64, torch.int32) else "float"
        fill = draw(st.floats(-8, 8, width=32) if kind == "float" else _elements(kind))
    kwargs = {**size_kw, **kwargs}
    size = args[0] if len(args) == 1 and not isinstance(args[0], int) else tuple(shape)   # one argument
    if fn == "randint":
        call_args = (*draw(st.sampled_from([(5,), (-3, 4)])), *(() if size_kw else (size,)))
        return Call(f"torch.randint({', '.join(map(repr, call_args))}{_kw_text(kwargs)})",
                    lambda: torch.randint(*call_args, **kwargs))
    if fn in ("full", "new_full"):
        if size_kw:
            kwargs["fill_value"] = fill
        args = () if size_kw else (size, fill)
    shown = _kw_text(kwargs)
    if fn.startswith("new_"):
        base_dtype = draw(st.sampled_from(_FLOATS))

        def make():
            made = getattr(torch.ones(2, dtype=base_dtype), fn)(*args, **kwargs)
            return _filled(made) if fn == "new_empty" else made
        return Call(f"torch.ones(2, dtype={base_dtype}).{fn}({', '.join(map(repr, args))}{shown})", make)
    factory = getattr(torch, fn)
    text = f"torch.{fn}({', '.join(map(repr, args))}{shown})"
    if fn == "empty":
        return Call(text + ".fill_(1)", lambda: _filled(factory(*args, **kwargs)))
    return Call(text, lambda: factory(*args, **kwargs))


def _filled(made: torch.Tensor) -> torch.Tensor:
    """torch.empty's values are whatever memory held: a script fills them before use."""
    with torch.no_grad():
        return made.fill_(1)


@st.composite
def range_calls(draw):
    fn = draw(st.sampled_from(["arange", "linspace", "logspace", "eye"]))
    kwargs = draw(options([None, *_FLOATS] if fn != "arange" else [None, *_FLOATS, torch.int64]))
    if fn == "arange":
        form = draw(st.sampled_from(["end", "start, end", "start, end, step"]))
        start, width = draw(st.integers(-4, 4)), draw(st.integers(1, 6))
        step = draw(st.sampled_from([1, 2, 0.5])) if form.endswith("step") else 1
        if isinstance(step, float) and kwargs.get("dtype") is torch.int64:
            step = 2
        args = {"end": (width,), "start, end": (start, start + width),
                "start, end, step": (start, start + width, step)}[form]
        if kwargs.get("requires_grad") and "dtype" not in kwargs:
            kwargs["dtype"] = torch.float32
    elif fn in ("linspace", "logspace"):
        start, end = draw(st.floats(-2, 2, width=32)), draw(st.floats(-2, 2, width=32))
        args = (start, end, draw(st.integers(1, 6)))
    else:
        args = (draw(st.integers(1, 4)),) + ((draw(st.integers(1, 4)),) if draw(st.booleans()) else ())
    factory = getattr(torch, fn)
    return Call(f"torch.{fn}({', '.join(map(repr, args))}{_kw_text(kwargs)})", lambda: factory(*args, **kwargs))


@st.composite
def like_calls(draw):
    shape = draw(shapes)
    fn = draw(st.sampled_from(["zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "empty_like"]))
    base_dtype = draw(st.sampled_from(_FLOATS))
    dtypes = [None, *_FLOATS] if fn in ("rand_like", "randn_like") else [None, *_FLOATS, torch.int64, torch.bool]
    kwargs = draw(options(dtypes))
    extra = (draw(st.floats(-8, 8, width=32)) if kwargs.get("dtype") not in (torch.int64, torch.bool)
             else draw(st.integers(0, 1)),) if fn == "full_like" else ()
    factory = getattr(torch, fn)
    text = f"torch.{fn}(torch.randn({tuple(shape)}, dtype={base_dtype}){''.join(f', {e!r}' for e in extra)}" \
           f"{_kw_text(kwargs)})"

    def make():
        made = factory(torch.randn(shape, dtype=base_dtype), *extra, **kwargs)
        return _filled(made) if fn == "empty_like" else made
    return Call(text, make)


calls = st.one_of(data_calls(), size_calls(), range_calls(), like_calls())


# -- one use of the result in a training step -------------------------------------------------
def _model(d_in: int) -> nn.Module:
    return nn.Sequential(nn.Linear(d_in, 8), nn.ReLU(), nn.Linear(8, 1))


def _as_float(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_floating_point() else t.float()


class Use:
    """One training loop in which the constructed tensor has one role."""

    def __init__(self, role: str, call: Call, activation: str = "none") -> None:
        self.role, self.call, self.activation = role, call, ACTIVATIONS[activation]

    def run(self, observe: bool) -> tuple[list[torch.Tensor], list[torch.Tensor], Any]:
        torch.manual_seed(0)
        audit = leaky.audit(steps=None) if observe else contextlib.nullcontext()
        losses: list[torch.Tensor] = []
        with audit:
            made = self.call.make() if self.role == "weight" else None
            model = opt = None
            for _ in range(STEPS):
                tensor = made if made is not None else self.call.make()
                if model is None:
                    model = _model(self._d_in(tensor))
                    extra = [made] if made is not None and made.requires_grad and made.is_leaf else []
                    opt = torch.optim.SGD([*model.parameters(), *extra], lr=0.01)
                loss = self._loss(model, tensor)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.detach().clone())
        params = [p.detach().clone() for g in opt.param_groups for p in g["params"]]
        return losses, params, audit if observe else None

    def _d_in(self, tensor: torch.Tensor) -> int:
        return (tensor.shape[-1] if tensor.ndim else 1) if self.role == "input" else 3

    def _loss(self, model: nn.Module, tensor: torch.Tensor) -> torch.Tensor:
        shape = tuple(tensor.shape)
        if self.role == "input":
            x = _as_float(tensor if tensor.ndim else tensor.reshape(1))
            out = model(self.activation(x.float()))
            return F.mse_loss(out, torch.zeros_like(out))
        if self.role == "rowwise":
            return self._rowwise(model, tensor)
        out = model(torch.randn(*shape, 3)).squeeze(-1)      # the same shape as the tensor
        if self.role == "target":
            return F.mse_loss(out, _as_float(tensor).to(out.dtype))
        if self.role == "labels":    # class indices of a 3-class cross_entropy
            logits = torch.stack([out, -out, out * 0.5], dim=-1)
            return F.cross_entropy(logits.reshape(-1, 3), tensor.long().remainder(3).reshape(-1))
        if self.role == "prediction":
            prediction = tensor if tensor.requires_grad else _as_float(tensor).float().requires_grad_()
            return F.mse_loss(self.activation(prediction.float()), torch.zeros(shape)) + out.pow(2).mean()
        if self.role == "sample_weight":
            return (_as_float(tensor).float() * out.pow(2)).mean()
        return (out * self.activation(_as_float(tensor).float())).pow(2).mean()   # "weight": a trainable scale

    def _rowwise(self, model: nn.Module, tensor: torch.Tensor) -> torch.Tensor:
        """`for row in x: preds.append(model(row).item())`, then a new tensor of the floats."""
        x = _as_float(tensor).float().detach().reshape(-1, tensor.shape[-1] if tensor.ndim else 1)
        inner = _model(x.shape[-1])
        preds = [inner(row).item() for row in x]
        rebuilt = torch.tensor(preds, requires_grad=True)
        return F.mse_loss(self.activation(rebuilt), torch.zeros(len(preds))) + model(torch.randn(4, 3)).pow(2).mean()


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bool(
        (a.reshape(-1).view(torch.uint8) == b.reshape(-1).view(torch.uint8)).all())


@settings(max_examples=max(1, int(200 * _SCALE)), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(call=calls, role=st.sampled_from(USES), activation=st.sampled_from(sorted(ACTIVATIONS)))
def test_constructed_tensors_never_break_the_audit(call, role, activation):
    note(f"{role} ({activation}): {call!r}")
    use = Use(role, call, activation)
    try:
        want_losses, want_params, _ = use.run(observe=False)
    except (RuntimeError, ValueError, TypeError, OverflowError) as exc:   # torch refuses this call:
        event(f"refused: {type(exc).__name__}: {str(exc)[:60]}")
        with pytest.raises(type(exc), match=re.escape(str(exc))):           # so it must under leaky
            use.run(observe=True)
        assert no_leaky_left() == []
        return
    got_losses, got_params, audit = use.run(observe=True)
    assert no_leaky_left() == []
    assert audit.report.run["internal_error"] is None
    assert audit.report.run["backward_calls"] == STEPS
    assert all(_same_bits(a, b) for a, b in zip(want_losses, got_losses)), (want_losses, got_losses)
    assert all(_same_bits(a, b) for a, b in zip(want_params, got_params))
    assert str(audit.report) and audit.report.to_json()


# -- the failures it found, one regression each ------------------------------------------------
def test_a_model_called_row_by_row_is_observed():
    """`for row in x: model(row)`: a 1-d input has no dim to sum over but its features;
    torch.sum(x, dim=[]) sums them all (it once left a float where a per-feature list was)."""
    model = _model(4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 4), torch.randn(16)
    with leaky.audit(steps=None) as audit:
        for _ in range(3):
            preds = [model(row).item() for row in x]
            loss = F.mse_loss(torch.tensor(preds, requires_grad=True), y)
            opt.zero_grad(); loss.backward(); opt.step()
    assert audit.report.run["internal_error"] is None and audit.report.run["backward_calls"] == 3
    (probe,) = audit.stats.inputs
    assert len(probe.mean) == 4 and len(probe.std) == 4
    assert probe.mean == pytest.approx(x.double().mean(0).tolist())
    assert "LK108" in {f.code for f in audit.report.findings}   # .item() cuts the path: reported, not a crash


def test_a_softmax_of_a_0d_tensor_is_observed():
    w = torch.tensor(0.5, requires_grad=True)
    with leaky.audit(steps=None) as audit:
        for _ in range(2):
            (torch.softmax(w, dim=-1) * w).backward()
    assert audit.report.run["internal_error"] is None and audit.report.run["backward_calls"] == 2


@pytest.mark.parametrize("shape, keep", [((5,), 0), ((5,), -1), ((2, 5), 1), ((2, 3, 5), -1), ((), -1)])
def test_per_unit_reductions_keep_one_value_per_unit(shape, keep):
    from leaky.record.reduce import amax_over, other_dims, sum_over

    x = torch.randn(shape, dtype=torch.float64)
    dims = other_dims(x.ndim, keep)
    units = shape[keep] if shape else 1
    assert sum_over(x, dims).numel() == units and amax_over(x, dims).numel() == units
    if not dims:   # nothing to reduce: a copy, never the tensor itself
        assert torch.equal(sum_over(x, dims), x) and sum_over(x, dims).data_ptr() != x.data_ptr()
        assert sum_over(x, dims, dtype=torch.float32).dtype == torch.float32
