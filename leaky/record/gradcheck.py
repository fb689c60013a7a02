"""Finite-difference check of a custom autograd.Function at the point actually seen.

For inputs x, a random output cotangent v and a random unit direction u, the analytic
vector-Jacobian product must match the central difference

    <grad_x <v, f(x)>, u>  ~=  (<v, f(x + eps u)> - <v, f(x - eps u)>) / (2 eps)

with error O(eps^2) from truncation and O(machine eps / eps) from rounding. In float64
with eps = 1e-6 both are far below the 1e-3 relative tolerance. A Function that computes
internally in float32 fails that test by rounding alone, so a disagreement must also hold
at float32 settings (eps = 1e-3, tolerance 2e-2), and at a nudged point (not a kink).
Every evaluation re-seeds the random generators identically, so a Function that draws
random numbers (a dropout mask) is compared with itself; the caller's random state is
restored afterwards. Pure: no hooks, no side effects.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

ROWS = 4               # rows kept from batched inputs
MAX_ELEMENTS = 4096    # inputs larger than this are sliced along the batch dim
WEIGHT_ELEMENTS = 1 << 18   # non-batched inputs (weights) up to this size are kept whole
DIRECTIONS = 2         # random directions per input; all must disagree to report


@dataclass(frozen=True)
class InputVerdict:
    index: int          # position of the input in the Function's arguments
    relative_error: float
    analytic: float
    numeric: float


@dataclass(frozen=True)
class GradcheckResult:
    checked: bool
    wrong: tuple[InputVerdict, ...] = ()
    note: str = ""      # why it could not be checked, or the precision used


def _batched_slice(args: tuple) -> tuple | None:
    """Cut the large batched inputs to their first ROWS rows; None if it cannot be done.

    The batch size is the first dim of the first tensor input (the data, by convention);
    large inputs with that first dim are sliced, the rest (weights) are kept whole.
    """
    tensors = [a for a in args if isinstance(a, Tensor) and a.is_floating_point()]
    if not tensors:
        return None
    if all(t.numel() <= MAX_ELEMENTS for t in tensors):
        return args
    batch = tensors[0].shape[0] if tensors[0].ndim else None
    if batch is None:
        return None

    def cut(a):
        if isinstance(a, Tensor) and a.is_floating_point() and a.numel() > MAX_ELEMENTS:
            if a.ndim and a.shape[0] == batch:
                return a[:ROWS]
            return a if a.numel() <= WEIGHT_ELEMENTS else None   # a weight: kept whole
        return a

    sliced = tuple(cut(a) for a in args)
    return None if any(s is None and a is not None for s, a in zip(sliced, args)) else sliced


def _outputs(value: Any) -> list[Tensor]:
    items = value if isinstance(value, (tuple, list)) else (value,)
    return [t for t in items if isinstance(t, Tensor) and t.is_floating_point()]


def _prepare(args: tuple, dtype) -> tuple[list, list[int]]:
    xs, diff = [], []
    for i, a in enumerate(args):
        if isinstance(a, Tensor) and a.is_floating_point():
            x = a.detach().to(dtype).clone()
            if a.requires_grad:
                x.requires_grad_(True)
                diff.append(i)
            xs.append(x)
        else:
            xs.append(a)
    return xs, diff


def _pairing(fn, xs: list, vs: list[Tensor]) -> float:
    with torch.no_grad():
        outs = _outputs(fn(*xs))
    return sum(float((o.to(v.dtype) * v).sum()) for o, v in zip(outs, vs))


PRECISE = (1e-6, 1e-3)     # (eps, relative tolerance) in float64
COARSE = (1e-3, 2e-2)      # ... for a Function that rounds to float32 inside


def _check_at(fn: Callable, args: tuple, dtype, gen: torch.Generator,
              settings: tuple[float, float]) -> tuple[list[InputVerdict], str]:
    xs, diff = _prepare(args, dtype)
    outs = _outputs(fn(*xs))
    if not outs or not diff:
        return [], "no differentiable input or output"
    precise = all(o.dtype == torch.float64 for o in outs)
    eps, tol = settings if precise else COARSE
    vs = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.device) for o in outs]
    live = [(o, v.to(o.dtype)) for o, v in zip(outs, vs) if o.requires_grad]
    if not live:
        return [], "outputs do not depend on the inputs"
    grads = torch.autograd.grad([o for o, _ in live], [xs[i] for i in diff], [v for _, v in live],
                                allow_unused=True)
    wrong = []
    for i, grad in zip(diff, grads):
        scale = 0.0 if grad is None else float(grad.norm())
        worst = None
        for _ in range(DIRECTIONS):
            u = torch.randn(xs[i].shape, generator=gen, dtype=torch.float64).to(xs[i].device)
            u = (u / u.norm()).to(xs[i].dtype)
            analytic = 0.0 if grad is None else float((grad * u).sum())
            plus = [x.detach() + eps * u if k == i else (x.detach() if isinstance(x, Tensor) else x)
                    for k, x in enumerate(xs)]
            minus = [x.detach() - eps * u if k == i else (x.detach() if isinstance(x, Tensor) else x)
                     for k, x in enumerate(xs)]
            numeric = (_pairing(fn, plus, vs) - _pairing(fn, minus, vs)) / (2 * eps)
            # NOTE: a projection can be ~0 by chance; measure the error against the size of
            # the gradient as well, so noise on a tiny projection is not a disagreement.
            error = abs(analytic - numeric) / max(abs(analytic), abs(numeric), 1e-3 * scale, 1e-12)
            if error > tol and (worst is None or error > worst.relative_error):
                worst = InputVerdict(i, error, analytic, numeric)   # any disagreeing direction counts
        if worst is not None:
            wrong.append(worst)
    return wrong, "float64" if precise else "float32 inside the Function"


def _devices(args: tuple) -> list[int]:
    return sorted({a.device.index or 0 for a in args if isinstance(a, Tensor) and a.is_cuda})


def check_function(fn: Callable, args: tuple) -> GradcheckResult:
    """Compare fn's backward with finite differences at (a slice of) args."""
    sliced = _batched_slice(args)
    if sliced is None:
        return GradcheckResult(False, note="inputs too large and not batched along dim 0")

    def seeded(*xs):
        torch.manual_seed(0)   # the same random draws in every evaluation
        return fn(*xs)

    with torch.random.fork_rng(devices=_devices(args)):
        return _verdict(seeded, sliced)


def _verdict(fn: Callable, sliced: tuple) -> GradcheckResult:
    gen = torch.Generator().manual_seed(0)
    dtype = torch.float64
    try:
        wrong, note = _check_at(fn, sliced, dtype, gen, PRECISE)
    except Exception:   # e.g. the Function mixes in float32 tensors of its own: check as is
        dtype = None
        try:
            wrong, note = _check_at(fn, sliced, dtype, gen, COARSE)
        except Exception as exc:
            return GradcheckResult(False, note=f"could not re-run it: {type(exc).__name__}")
    if wrong:
        # NOTE: rounding inside the Function, or a kink (relu at exactly 0) where finite
        # differences straddle two slopes, also disagree. Only a disagreement that persists
        # at float32 settings (rounding) and at a point nudged well beyond eps (kinks) is a
        # wrong backward.
        nudged = tuple(a + 1e-2 * torch.randn(a.shape, generator=gen, dtype=a.dtype).to(a.device)
                       if isinstance(a, Tensor) and a.is_floating_point() else a for a in sliced)
        for point, settings in ((sliced, COARSE), (nudged, PRECISE)):
            try:
                again, _ = _check_at(fn, point, dtype, gen, settings)
            except Exception:
                again = wrong
            persistent = {v.index for v in again}
            wrong = [v for v in wrong if v.index in persistent]
    return GradcheckResult(True, tuple(wrong), note)
