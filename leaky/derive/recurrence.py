"""Recurrences: a weight applied again and again across time steps.

Backprop through time multiplies the gradient by the recurrent Jacobian once per step,
dL/dh_{t-1} = W_hh^T diag(f'(a_t)) dL/dh_t, so its size after k steps scales like
rho(W_hh)^k (the spectral radius), damped by the activation's derivative. Two sources:
`nn.RNN/GRU/LSTM` modules (their `weight_hh_l{k}`), and hand-written loops in which one
square parameter feeds a matmul at the same site many times per step.
"""
from __future__ import annotations

import torch
from torch import nn

from leaky import ops
from leaky.stats import OpStats, RecurrenceStats, _source


EXACT_LIMIT = 512   # above this size, estimate rho instead of a full eigendecomposition


def spectral_radius(weight: torch.Tensor, blocks: int = 1) -> float:
    """Largest |eigenvalue| of the (block of the) recurrent matrix; max over gate blocks."""
    with torch.no_grad(), torch._C.DisableTorchFunction():
        w = weight.detach().to("cpu", torch.float64)
        if not torch.isfinite(w).all():
            return float("nan")
        radii = [_radius(block) for block in w.chunk(blocks, dim=0)]
    return max(radii)


def _radius(matrix: torch.Tensor, iterations: int = 200) -> float:
    if matrix.shape[0] <= EXACT_LIMIT:
        return torch.linalg.eigvals(matrix).abs().max().item()
    # NOTE: Gelfand's formula, rho = lim ||W^k||^(1/k): the mean log growth of a random
    # vector over the last half of the iterations converges to log rho even when the
    # leading eigenvalues are a complex pair (where plain power iteration oscillates).
    gen = torch.Generator().manual_seed(0)
    vector = torch.randn(matrix.shape[0], 1, dtype=matrix.dtype, generator=gen)
    logs = []
    for _ in range(iterations):
        vector = matrix @ vector
        norm = vector.norm()
        if norm == 0:
            return 0.0
        logs.append(norm.log().item())
        vector = vector / norm
    tail = logs[iterations // 2:]
    return float(torch.tensor(tail).mean().exp())


class RadiusCache:
    """Spectral radii change slowly: a watch that rebuilds its statistics at every sampled
    step recomputes each one only every `every` builds (and always on the first)."""

    def __init__(self, every: int = 10) -> None:
        self.every = every
        self.builds = 0
        self._values: dict[tuple[int, int], tuple[int, float]] = {}

    def radius(self, weight: torch.Tensor, blocks: int = 1) -> float:
        key = (id(weight), blocks)
        cached = self._values.get(key)
        if cached is None or self.builds - cached[0] >= self.every:
            cached = self._values[key] = (self.builds, spectral_radius(weight, blocks))
        return cached[1]


def _module_recurrences(modules, by_site: dict[int, OpStats], radius, init_sites: dict):
    for info in modules.infos:
        module = info.module
        if not isinstance(module, nn.RNNBase):
            continue
        name = modules.name(info.key)
        kind = module.mode.lower()
        gated = kind in ("lstm", "gru")
        blocks = {"lstm": 4, "gru": 3}.get(kind, 1)
        chunks = module.num_layers * (2 if module.bidirectional else 1)
        step_ops = [op for op in by_site.values() if op.module_key == info.key and ops.rnn_step(op.node)
                    and op.profile]
        profile = step_ops[0].profile if step_ops else None
        for layer in range(module.num_layers):
            weight = getattr(module, f"weight_hh_l{layer}")
            layer_profile = None
            if profile is not None and len(profile) % chunks == 0:
                size = len(profile) // chunks
                start = layer * (2 if module.bidirectional else 1) * size
                layer_profile = tuple(profile[start:start + size])
            yield RecurrenceStats(name, f"weight_hh_l{layer}", kind, gated,
                                  radius(weight, blocks), layer_profile,
                                  step_ops[0] if step_ops else None, _source(init_sites.get(id(weight))))


def _loop_recurrences(modules, param_uses: dict, by_site: dict[int, OpStats], owners: dict, radius,
                      init_sites: dict):
    for pid, sites in param_uses.items():
        owner = owners.get(pid)
        if owner is None:
            continue
        key, pname, param = owner
        if isinstance(modules.infos[key].module, nn.RNNBase):
            continue
        for site in sites:
            op = by_site.get(site)
            if op is None or not op.profile or op.occurrences < 2:
                continue
            yield RecurrenceStats(modules.name(key), pname, "loop", False, radius(param),
                                  op.profile, op, _source(init_sites.get(pid)))


def find_recurrences(modules, param_uses, by_site, owners, cache: RadiusCache | None = None,
                     init_sites: dict | None = None):
    """Each recurrent weight with its radius, its per-time-step profile and the line that
    initialised it (`init_sites`: id(param) -> the user's last in-place write to it)."""
    radius = (cache or RadiusCache()).radius
    if cache is not None:
        cache.builds += 1
    init_sites = init_sites or {}
    yield from _module_recurrences(modules, by_site, radius, init_sites)
    yield from _loop_recurrences(modules, param_uses, by_site, owners, radius, init_sites)
