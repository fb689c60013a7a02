"""Stats: what the recorder saw, reduced to host numbers the checks can read.

`StatsBuilder` folds each step's single device-to-host copy into running per-site and
per-parameter accumulators, so memory grows with the number of ops and parameters, not
with steps or batch size. `AuditStats` is the frozen result the checks consume.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from leaky.config import AuditConfig
from leaky.finding import Source
from leaky.record.activations import UnitStats, median_from_hist
from leaky.record.gradients import HostStep


@dataclass
class CutEvent:
    """A place where a tensor leaves the autograd graph."""

    kind: str                  # "detach" | "data" | "numpy" | "item" | "tolist" | "no_grad"
    producer: int | None       # module key of the module that produced the cut tensor
    module: int | None         # module key running when the cut happened
    where: tuple[str, int] | None
    step: int


@dataclass(frozen=True)
class OpStats:
    site: int
    op: str
    node: str
    module: str | None
    module_key: int | None
    source: Source | None
    first_seq: int
    steps: int                   # steps in which its backward ran
    occurrences: float           # backward calls per step (>1: a loop or a shared module)
    grad_in: float | None        # geometric mean over steps of the gradient norm arriving
    grad_out: float | None       # ... leaving toward activations
    grad_param: float | None     # ... leaving toward parameters
    gain: float | None           # geometric mean of grad_out / grad_in
    zeroed_share: float | None   # share of arriving nonzero elements this op zeroed
    nonzero_in: float            # arriving nonzero elements, summed over steps
    profile: tuple[float, ...] | None   # last step: arriving norm per occurrence, in forward order
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ActivationStats:
    site: int
    op: str
    family: str
    module: str | None
    source: Source | None
    units: int
    samples: int                  # samples per unit observed
    dead_units: int | None        # relu family: never fired in the trailing window
    died_steps: tuple[int, ...]   # for dead units that fired earlier: step after their last firing
    window: int                   # trailing steps used for "dead"
    flat_share: float | None      # unit-samples in a flat region
    stuck_share: float | None     # units flat on >= 99% of their samples
    median_derivative_share: float | None
    peaked_share: float | None    # softmax: rows with max probability > 0.99
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParamStats:
    name: str
    module: str | None
    module_key: int | None
    shape: tuple[int, ...]
    requires_grad: bool
    in_optimizer: bool
    grad_steps: int               # steps at whose end it had a .grad
    grad_norm: float | None       # last observed gradient norm


@dataclass(frozen=True)
class RecurrenceStats:
    module: str | None
    param: str
    kind: str                     # "rnn_tanh" | "rnn_relu" | "lstm" | "gru" | "loop"
    gated: bool
    spectral_radius: float
    profile: tuple[float, ...] | None   # gradient norm reaching each time step, t = 0 first
    op: OpStats | None


@dataclass(frozen=True)
class NonFinite:
    phase: str                    # "forward" | "backward"
    step: int
    op: OpStats
    value: str                    # "nan" | "inf"


@dataclass(frozen=True)
class Cut:
    kind: str
    producer: str | None
    module: str | None
    source: Source | None
    step: int


@dataclass(frozen=True)
class AuditStats:
    steps: int
    backward_calls: int
    used_optimizer: bool
    ops: tuple[OpStats, ...]
    activations: tuple[ActivationStats, ...]
    params: tuple[ParamStats, ...]
    recurrences: tuple[RecurrenceStats, ...]
    nonfinite: tuple[NonFinite, ...]
    cuts: tuple[Cut, ...]
    losses: tuple[float, ...]
    grad_norms: tuple[float, ...]
    module_types: dict[str, str] = field(default_factory=dict)
    modules_ran: frozenset = frozenset()
    clean_steps: int = 0          # steps before the first NaN/Inf; per-site statistics cover only these

    @classmethod
    def empty(cls) -> "AuditStats":
        return cls(0, 0, False, (), (), (), (), (), (), (), ())

    def op(self, site: int) -> OpStats | None:
        for op in self.ops:
            if op.site == site:
                return op
        return None


class _SiteAcc:
    """Running sums for one site."""

    __slots__ = ("steps", "occ", "log_in", "n_in", "log_out", "n_out", "log_par", "n_par",
                 "log_gain", "n_gain", "nonzero_in", "zeroed", "profile")

    def __init__(self) -> None:
        self.steps = 0
        self.occ = 0
        self.log_in = self.log_out = self.log_par = self.log_gain = 0.0
        self.n_in = self.n_out = self.n_par = self.n_gain = 0
        self.nonzero_in = 0.0
        self.zeroed = 0.0
        self.profile: list[tuple[int, float]] = []


def _log(value: float) -> float | None:
    return math.log10(value) if value > 0 and math.isfinite(value) else None


def _norm(values: np.ndarray) -> float:
    return float(np.sqrt(np.sum(np.square(values)))) if len(values) else 0.0


class StatsBuilder:
    def __init__(self, sites, modules, config: AuditConfig) -> None:
        self.sites = sites
        self.modules = modules
        self.config = config
        self.steps = 0
        self.acc: dict[int, _SiteAcc] = defaultdict(_SiteAcc)
        self.losses: list[float] = []
        self.grad_norms: list[float] = []
        self.nonfinite: dict[str, tuple[int, int, str]] = {}
        self.first_bad_step: int | None = None   # first step with a NaN/Inf anywhere
        self.param_grad_steps: dict[int, int] = defaultdict(int)
        self.param_last_norm: dict[int, float] = {}
        self.opt_params: dict[int, nn.Parameter] = {}
        self._param_owner: dict[int, tuple[int, str, nn.Parameter]] = {}
        self._owners_seen = -1

    # -- parameters ------------------------------------------------------------------
    def note_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        for group in optimizer.param_groups:
            for param in group["params"]:
                self.opt_params[id(param)] = param

    def _owners(self) -> dict[int, tuple[int, str, nn.Parameter]]:
        if self._owners_seen != len(self.modules.infos):
            owners: dict = {}
            for key, pname, param in self.modules.parameters():
                owners.setdefault(id(param), (key, pname, param))
            self._param_owner = owners
            self._owners_seen = len(self.modules.infos)
        return self._param_owner

    def module_of_param(self, param: nn.Parameter) -> int | None:
        owner = self._owners().get(id(param))
        return None if owner is None else owner[0]

    def tracked_params(self) -> list[nn.Parameter]:
        params = {pid: p for pid, (_, _, p) in self._owners().items()}
        params.update(self.opt_params)
        return [p for p in params.values() if p.requires_grad]

    def collect_param_grads(self, buffer) -> tuple[list[int], int]:
        """Queue the norms of every present .grad into the step's values."""
        with_grad = [p for p in self.tracked_params() if p.grad is not None and not p.grad.is_sparse]
        offset = len(buffer.values)
        if with_grad:
            with torch._C.DisableTorchFunction():
                buffer.values.extend(torch._foreach_norm([p.grad for p in with_grad]))
        return [id(p) for p in with_grad], offset

    # -- per step ----------------------------------------------------------------------
    def add_step(self, step: int, host: HostStep, grads: tuple[list[int], int]) -> None:
        self.steps += 1
        per_site = self._per_site(host)
        bad = self._forward_nonfinite(step, host) | self._backward_nonfinite(step, host)
        if bad and self.first_bad_step is None:
            self.first_bad_step = step
        if self.first_bad_step is None:
            # NOTE: once a NaN/Inf appears, every later statistic describes the NaN, not the
            # model: the per-site statistics keep only the steps before it.
            for site, (sq_in, sq_act, sq_par, occ, has_act, has_par, prof, nz_in, zeroed) in per_site.items():
                acc = self.acc[site]
                acc.nonzero_in += nz_in
                acc.zeroed += zeroed
                self._fold(acc, math.sqrt(sq_in), math.sqrt(sq_act) if has_act else None,
                           math.sqrt(sq_par) if has_par else None, occ, prof)
        self._param_grads(grads, host.values)
        if "loss" in host.extras:
            self.losses.append(float(host.extras["loss"]))

    def _per_site(self, host: HostStep) -> dict[int, list]:
        """Combine this step's hook calls per site: squared norms, counts, the profile."""
        values = host.values
        per_site: dict[int, list] = {}
        for rec in host.records:
            end = rec.offset + rec.n_in + rec.n_act + rec.n_param
            norms = values[rec.offset:end]
            n_in = _norm(norms[:rec.n_in])
            cur = per_site.setdefault(rec.site, [0.0, 0.0, 0.0, 0, False, False, [], 0.0, 0.0])
            cur[0] += n_in * n_in
            cur[1] += _norm(norms[rec.n_in:rec.n_in + rec.n_act]) ** 2
            cur[2] += _norm(norms[rec.n_in + rec.n_act:end]) ** 2
            cur[3] += 1
            cur[4] |= rec.n_act > 0
            cur[5] |= rec.n_param > 0
            cur[6].append((rec.seq, n_in))
            if rec.counted:
                nz_in, nz_act = values[end], values[end + 1]
                cur[7] += nz_in
                cur[8] += max(0.0, nz_in - nz_act)
        return per_site

    def _fold(self, acc: _SiteAcc, n_in, n_act, n_par, occ, prof) -> None:
        acc.steps += 1
        acc.occ += occ
        for attr, count, value in (("log_in", "n_in", n_in), ("log_out", "n_out", n_act), ("log_par", "n_par", n_par)):
            logged = None if value is None else _log(value)
            if logged is not None:
                setattr(acc, attr, getattr(acc, attr) + logged)
                setattr(acc, count, getattr(acc, count) + 1)
        if n_act is not None and n_in > 0:
            gain = _log(n_act / n_in) if n_act > 0 else -12.0
            acc.log_gain += gain if gain is not None else 0.0
            acc.n_gain += 1
        acc.profile = sorted(prof) if occ > 1 else []

    def _backward_nonfinite(self, step: int, host: HostStep) -> bool:
        """Note the first node that turned a finite incoming gradient non-finite.

        Backward runs nodes in decreasing creation order, so among this step's candidates
        the first to emit a non-finite gradient is the one created last.
        """
        candidates, any_bad = [], False
        for rec in host.records:
            end = rec.offset + rec.n_in + rec.n_act + rec.n_param
            arriving, leaving = host.values[rec.offset:rec.offset + rec.n_in], host.values[rec.offset + rec.n_in:end]
            if np.all(np.isfinite(leaving)):
                continue
            any_bad = True
            if np.all(np.isfinite(arriving)):
                candidates.append((rec.seq, rec.site, "nan" if np.isnan(leaving).any() else "inf"))
        if candidates and "backward" not in self.nonfinite:
            seq, site, value = max(candidates)
            self.nonfinite["backward"] = (step, site, value)
        return any_bad

    def _forward_nonfinite(self, step: int, host: HostStep) -> bool:
        bad = np.flatnonzero(~np.isfinite(host.forward_finite))
        if len(bad) and "forward" not in self.nonfinite:
            self.nonfinite["forward"] = (step, host.forward_sites[int(bad[0])], "non-finite")
        return bool(len(bad))

    def _param_grads(self, grads: tuple[list[int], int], values: np.ndarray) -> None:
        ids, offset = grads
        norms = values[offset:offset + len(ids)]
        for pid, norm in zip(ids, norms):
            self.param_grad_steps[pid] += 1
            self.param_last_norm[pid] = float(norm)
        if ids:
            self.grad_norms.append(_norm(norms))

    # -- the end -----------------------------------------------------------------------
    def build(self, units: dict[int, UnitStats], cuts: dict, param_uses: dict, optimizers: list,
              backward_calls: int) -> AuditStats:
        from leaky.record.recurrence import find_recurrences  # local: uses the op table below

        ops = tuple(self._op_stats(site) for site in self.sites.sites)
        by_site = {op.site: op for op in ops}
        activations = tuple(self._activation_stats(site, stats, by_site) for site, stats in units.items())
        params = tuple(self._param_stats())
        recurrences = tuple(find_recurrences(self.modules, param_uses, by_site, self._owners()))
        nonfinite = tuple(NonFinite(phase, step, by_site[site], value)
                          for phase, (step, site, value) in sorted(self.nonfinite.items(), reverse=True))
        name = self.modules.name
        cut_list = tuple(Cut(c.kind, name(c.producer), name(c.module), _source(c.where), c.step)
                         for c in cuts.values())
        types = {name(info.key) or "": info.type_name for info in self.modules.infos}
        ran = frozenset(op.module for op in ops if op.module is not None)
        return AuditStats(self.steps, backward_calls, bool(optimizers), ops, activations, params,
                          recurrences, nonfinite, cut_list, tuple(self.losses), tuple(self.grad_norms),
                          types, ran, self.clean_steps)

    def _op_stats(self, site) -> OpStats:
        acc = self.acc.get(site.index) or _SiteAcc()
        mean = lambda total, n: 10.0 ** (total / n) if n else None  # noqa: E731
        zeroed = acc.zeroed / acc.nonzero_in if acc.nonzero_in > 0 else None
        profile = tuple(n for _, n in acc.profile) if acc.profile else None
        return OpStats(site.index, site.op, site.node, self.modules.name(site.module_key), site.module_key,
                       _source((site.file, site.line) if site.file else None), site.first_seq, acc.steps,
                       acc.occ / acc.steps if acc.steps else 0.0, mean(acc.log_in, acc.n_in),
                       mean(acc.log_out, acc.n_out), mean(acc.log_par, acc.n_par),
                       mean(acc.log_gain, acc.n_gain), zeroed, acc.nonzero_in, profile, dict(site.detail))

    @property
    def clean_steps(self) -> int:
        """Steps before the first NaN/Inf: the ones that describe the model."""
        return self.steps if self.first_bad_step is None else self.first_bad_step

    def _activation_stats(self, site: int, stats: UnitStats, by_site) -> ActivationStats:
        op = by_site[site]
        host = stats.host()
        clean = self.clean_steps
        window = max(1, min(self.config.dead_window_steps, math.ceil(clean / 2)))
        dead, died = None, ()
        if host["last_active"] is not None and clean > 0:
            last = host["last_active"]
            cutoff = clean - window   # steps are 0-based; a unit that fired at >= cutoff is alive
            dead_mask = last < cutoff
            dead = int(dead_mask.sum())
            died = tuple(int(s) + 1 for s in last[dead_mask] if s >= 0)
        flat_share = stuck = None
        if host["flat"] is not None and stats.samples:
            flat_share = float(host["flat"].sum() / (stats.samples * stats.units))
            stuck = float(np.mean(host["flat"] >= 0.99 * stats.samples))
        peaked = host["peaked_rows"] / stats.rows if stats.rows else None
        return ActivationStats(site, op.op, stats.activation.family, op.module, op.source, stats.units,
                               stats.samples, dead, died, window, flat_share, stuck,
                               median_from_hist(host["hist"]), peaked, dict(stats.detail))

    def _param_stats(self):
        owners = self._owners()
        seen = set()
        for pid, (key, pname, param) in owners.items():
            seen.add(pid)
            yield self._one_param(pid, param, key, pname)
        for pid, param in self.opt_params.items():
            if pid not in seen:
                yield self._one_param(pid, param, None, f"<param {tuple(param.shape)}>")

    def _one_param(self, pid, param, key, pname) -> ParamStats:
        module = self.modules.name(key) if key is not None else None
        full = f"{module}.{pname}" if module else pname
        return ParamStats(full, module, key, tuple(param.shape), param.requires_grad,
                          pid in self.opt_params, self.param_grad_steps.get(pid, 0),
                          self.param_last_norm.get(pid))


def thin(profile: tuple[float, ...], most: int = 64) -> tuple[float, ...]:
    """At most `most` evenly spaced points of a long profile, plus the last (JSON stays small)."""
    if len(profile) <= most:
        return tuple(profile)
    stride = len(profile) / most
    return tuple(profile[int(i * stride)] for i in range(most)) + (profile[-1],)


def _source(where) -> Source | None:
    return None if where is None else Source(where[0], where[1])
