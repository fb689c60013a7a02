"""Fold each step's single device-to-host copy into running sums, then build AuditStats.

Memory grows with the number of ops, units and parameters, never with steps or batch
size: per site a few running sums and the last step's per-occurrence profile.
"""
from __future__ import annotations

import math
from collections import defaultdict, deque

import numpy as np
import torch
from torch import nn

from leaky.config import AuditConfig
from leaky.fold_origins import cast_stats_of, optimizer_stats_of
from leaky.record.activations import HIST_LOW, UnitStats, median_from_hist
from leaky.record.gradients import HostStep
from leaky.stats import (ActivationStats, AuditStats, Cut, FunctionStats, InputStats, LossStats, NonFinite,
                         OpStats, ParamStats, SeriesRow, WeightStats, _source)


SERIES_LIMIT = 100_000   # per-step scalars kept in memory; a watched run's store keeps them all
UPDATE_LIMIT = 256       # sampled update ratios kept per parameter
ZERO_WARMUP = 5          # steps after a weight was exactly 0 whose update ratio is not judged


def _with_samples(stats: UnitStats, samples: int, counted: int) -> UnitStats:
    import copy

    merged = copy.copy(stats)
    merged.samples, merged.counted = samples, counted
    return merged


def _histogram(host: dict, stats: UnitStats) -> dict | None:
    """The picture of an activation layer, from what was already accumulated."""
    if host["hist"] is not None:
        edges = np.linspace(HIST_LOW, 0.0, len(host["hist"]) + 1)
        return {"kind": "log10_derivative_share", "edges": edges.tolist(), "counts": host["hist"].tolist(),
                "flat_below": math.log10(stats.detail["flat_share"])}
    if host["active"] is not None and stats.counted:
        rates = host["active"] / stats.counted
        counts, edges = np.histogram(rates, bins=20, range=(0.0, 1.0))
        return {"kind": "fire_rate", "edges": edges.tolist(), "counts": counts.tolist(),
                "never": int((host["active"] == 0).sum())}
    return None


def _death_steps(last_fired: np.ndarray, observed: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """For dead units that fired earlier: the step after each one's last firing, and the
    first observed step that saw it silent (the next observed step after that firing).

    NOTE: both are optimizer steps. A watch observes every N-th step, so a unit died
    somewhere between the two; `last + 1` alone would claim it died right after the last
    step that happened to be observed."""
    fired = last_fired[last_fired >= 0].astype(np.int64)
    after = np.searchsorted(np.asarray(observed, dtype=np.int64), fired, side="right")
    seen = [observed[min(int(i), len(observed) - 1)] for i in after]
    return tuple(int(s) + 1 for s in fired), tuple(int(s) for s in seen)


def _loss_scaler() -> dict | None:
    """A live, enabled torch.amp.GradScaler and its current scale (one gc scan, at the end)."""
    import gc
    import warnings

    scaler_types = tuple(t for t in (getattr(torch.amp, "GradScaler", None),
                                     getattr(getattr(torch, "cuda", None) and torch.cuda.amp, "GradScaler", None))
                         if isinstance(t, type))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                if isinstance(obj, scaler_types) and obj.is_enabled():
                    return {"scale": float(obj.get_scale())}
            except Exception:
                continue
    return None


class _SiteAcc:
    """Running sums for one site."""

    __slots__ = ("steps", "occ", "log_in", "n_in", "log_out", "n_out", "log_par", "n_par",
                 "log_gain", "n_gain", "nonzero_in", "zeroed", "profile", "half_zero", "half_subnormal",
                 "half_numel")

    def __init__(self) -> None:
        self.steps = 0
        self.occ = 0
        self.log_in = self.log_out = self.log_par = self.log_gain = 0.0
        self.n_in = self.n_out = self.n_par = self.n_gain = 0
        self.nonzero_in = 0.0
        self.zeroed = 0.0
        self.profile: list[tuple[int, float]] = []
        self.half_zero = self.half_subnormal = 0.0   # low-precision gradients arriving
        self.half_numel = 0


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
        # every step (sampled or not): (step, loss, total grad norm, learning rate)
        self.series: deque[SeriesRow] = deque(maxlen=SERIES_LIMIT)
        self.sample_steps: deque[int] = deque(maxlen=SERIES_LIMIT)   # steps observed in detail
        self.updates: dict[int, deque] = defaultdict(lambda: deque(maxlen=UPDATE_LIMIT))  # param -> (step, ratio, grad)
        self.zero_weight_step: dict[int, int] = {}   # param -> last step it was exactly 0
        # per optimizer (index): sampled steps checked, and those whose backward calls all
        # started from the previous step's gradients
        self.carry_checked: dict[int, int] = defaultdict(int)
        self.carried_steps: dict[int, int] = defaultdict(int)
        self.nonfinite: dict[str, tuple[int, int, str]] = {}
        self.first_bad_step: int | None = None   # first step with a NaN/Inf anywhere
        self.first_rms: dict[int, float] = {}    # site -> forward output RMS, first clean step
        self.global_units: dict[int, dict] | None = None   # activation counters summed across ranks
        self.rank_events: list[dict] = []          # first non-finite event of each rank (distributed)
        self.remote_events_done = False
        self._radius_cache = None
        self.param_grad_steps: dict[int, int] = defaultdict(int)
        self.param_last_norm: dict[int, float] = {}
        self.opt_params: dict[int, nn.Parameter] = {}
        self.param_group: dict[int, tuple[int, int]] = {}   # id(param) -> (optimizer index, group index)
        self.origins = None   # the recorder's OriginWatch, set at build
        self._first_optimizer_order: int | None = None
        self._param_owner: dict[int, tuple[int, str, nn.Parameter]] = {}
        self._owners_seen = -1

    # -- parameters ------------------------------------------------------------------
    def note_optimizer(self, optimizer: torch.optim.Optimizer, index: int) -> None:
        for group_index, group in enumerate(optimizer.param_groups):
            for param in group["params"]:
                self.opt_params[id(param)] = param
                self.param_group.setdefault(id(param), (index, group_index))

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

    def collect_param_grads(self, buffer, known=None) -> tuple[list[int], int]:
        """Queue the norms of every present .grad into the step's values; `known(grad)` gives
        a norm already taken of that very tensor (or None), which is reused."""
        with_grad = [p for p in self.tracked_params() if p.grad is not None and not p.grad.is_meta]
        offset = len(buffer.values)
        if with_grad:
            grads = [p.grad.coalesce().values() if p.grad.is_sparse else p.grad for p in with_grad]
            reused = [known(g) if known is not None else None for g in grads]
            with torch._C.DisableTorchFunction():
                computed = iter(torch._foreach_norm([g for g, n in zip(grads, reused) if n is None])
                                if any(n is None for n in reused) else ())
            buffer.values.extend(n if n is not None else next(computed) for n in reused)
        return [id(p) for p in with_grad], offset

    # -- per step ----------------------------------------------------------------------
    def add_series(self, rows) -> None:
        self.series.extend(SeriesRow(*row) for row in rows)

    def add_step(self, step: int, host: HostStep, grads: tuple[list[int], int], updates=None) -> None:
        self.steps += 1
        self.sample_steps.append(step)
        for key, value in host.extras.items():
            if key.startswith("carried:"):
                index = int(key.split(":")[1])
                self.carry_checked[index] += 1
                self.carried_steps[index] += bool(value > 0)
        per_site = self._per_site(host)
        forward_bad = self._forward_nonfinite(step, host)
        backward_bad = self._backward_nonfinite(step, host)
        loss_bad = "loss" in host.extras and not math.isfinite(host.extras["loss"])
        if (forward_bad or loss_bad) and self.first_bad_step is None:
            self.first_bad_step = step
        # NOTE: a step whose only non-finite values are gradients (a loss scaler's overflow
        # step, which the scaler skips) is left out of the sums but does not end them.
        if self.first_bad_step is None and not backward_bad:
            self._first_rms(host)
            # NOTE: once a NaN/Inf appears, every later statistic describes the NaN, not the
            # model: the per-site statistics keep only the steps before it.
            for site, (sq_in, sq_act, sq_par, occ, has_act, has_par, prof, nz_in, zeroed, half_zero, half_sub,
                       half_numel) in per_site.items():
                acc = self.acc[site]
                acc.nonzero_in += nz_in
                acc.zeroed += zeroed
                acc.half_zero += half_zero
                acc.half_subnormal += half_sub
                acc.half_numel += half_numel
                self._fold(acc, math.sqrt(sq_in), math.sqrt(sq_act) if has_act else None,
                           math.sqrt(sq_par) if has_par else None, occ, prof)
        graded = self._param_grads(grads, host.values)
        if updates is not None:
            self._updates(step, updates, host.values, graded)

    def _updates(self, step: int, layout, values: np.ndarray, graded: set[int]) -> None:
        ids, offset = layout
        n = len(ids)
        for pid, update, weight in zip(ids, values[offset:offset + n], values[offset + n:offset + 2 * n]):
            if not (math.isfinite(update) and math.isfinite(weight)):
                continue   # after an overflow the ratio describes the overflow
            if weight == 0:
                self.zero_weight_step[pid] = step
            # NOTE: a weight that started at exactly 0 gets its scale from the first updates
            # (with momentum the second update can exceed the first weight): its ratio means
            # nothing for the few steps after.
            young = step - self.zero_weight_step.get(pid, -ZERO_WARMUP) < ZERO_WARMUP
            ratio = float(update / weight) if weight > 0 and not young else None
            grad = self.param_last_norm.get(pid) if pid in graded else None
            self.updates[pid].append((step, ratio, pid in graded, float(update), grad))

    def _first_rms(self, host: HostStep) -> None:
        for site, norm, numel in zip(host.forward_sites, host.forward_finite, host.forward_numel):
            if site not in self.first_rms and numel:
                self.first_rms[site] = float(norm) / math.sqrt(numel)

    def _per_site(self, host: HostStep) -> dict[int, list]:
        """Combine this step's hook calls per site: squared norms, counts, the profile."""
        values = host.values
        per_site: dict[int, list] = {}
        for rec in host.records:
            end = rec.offset + rec.n_in + rec.n_act + rec.n_param
            norms = values[rec.offset:end]
            n_in = _norm(norms[:rec.n_in])
            cur = per_site.setdefault(rec.site, [0.0, 0.0, 0.0, 0, False, False, [], 0.0, 0.0, 0.0, 0.0, 0])
            cur[0] += n_in * n_in
            cur[1] += _norm(norms[rec.n_in:rec.n_in + rec.n_act]) ** 2
            cur[2] += _norm(norms[rec.n_in + rec.n_act:end]) ** 2
            cur[3] += 1
            cur[4] |= rec.n_act > 0
            cur[5] |= rec.n_param > 0
            cur[6].append((rec.seq, n_in))
            extra = end
            if rec.counted:
                nz_in, nz_act = values[extra], values[extra + 1]
                cur[7] += nz_in
                cur[8] += max(0.0, nz_in - nz_act)
                extra += 2
            if rec.half:
                cur[9] += values[extra]
                cur[10] += values[extra + 1]
                cur[11] += rec.numel_in
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

    def _param_grads(self, grads: tuple[list[int], int], values: np.ndarray) -> set[int]:
        """Fold the step's parameter gradient norms; the ids whose gradient was nonzero."""
        ids, offset = grads
        norms = values[offset:offset + len(ids)]
        graded = set()
        for pid, norm in zip(ids, norms):
            self.param_grad_steps[pid] += 1
            self.param_last_norm[pid] = float(norm)
            if norm > 0:
                graded.add(pid)
        return graded

    # -- the end -----------------------------------------------------------------------
    def build(self, units: dict[int, UnitStats], cuts: dict, param_uses: dict, optimizers: list,
              backward_calls: int, probes, function_checks: dict, idle_optimizer: bool = False,
              init_sites: dict | None = None, origins=None, idle_at: tuple | None = None,
              coupled=frozenset(), syncs=(), compiled: frozenset = frozenset()) -> AuditStats:
        from leaky.record.recurrence import RadiusCache, find_recurrences  # local: imports stats

        self.origins = origins
        optimizer_stats = optimizer_stats_of(origins, optimizers) if origins is not None else ()
        built = [origins.optimizer(o) for o in optimizers] if origins is not None else []
        self._first_optimizer_order = min((o.order for o in built if o.where is not None), default=None)
        ops = tuple(self._op_stats(site) for site in self.sites.sites)
        by_site = {op.site: op for op in ops}
        activations = tuple(self._activation_stats(site, stats, by_site) for site, stats in units.items())
        params = tuple(self._param_stats())
        if self._radius_cache is None:
            self._radius_cache = RadiusCache()
        recurrences = tuple(find_recurrences(self.modules, param_uses, by_site, self._owners(), self._radius_cache))
        nonfinite = tuple(NonFinite(phase, step, by_site[site], value)
                          for phase, (step, site, value) in sorted(self.nonfinite.items(), reverse=True))
        nonfinite = self._with_rank_events(nonfinite)
        name = self.modules.name
        cut_list = tuple(Cut(c.kind, tuple(name(k) for k in c.producer), name(c.module), _source(c.where), c.step)
                         for c in cuts.values())
        types = {name(info.key) or "": info.type_name for info in self.modules.infos}
        ran = frozenset(op.module for op in ops if op.module is not None)
        losses_seen, inputs, weights = self._probe_stats(probes, init_sites or {})
        series = tuple(sorted(self.series, key=lambda row: row.step))
        losses = [row.loss for row in series if row.loss is not None]
        grad_norms = [row.grad_norm for row in series if row.grad_norm is not None]
        scaler = _loss_scaler() if any(op.underflow_share is not None for op in ops) else None
        return AuditStats(self.steps, backward_calls, bool(optimizers), ops, activations, params,
                          recurrences, nonfinite, cut_list, tuple(losses), tuple(grad_norms),
                          types, ran, self.clean_steps, losses_seen, inputs, weights,
                          tuple(self._function_stats(function_checks)), scaler, series, tuple(self.sample_steps),
                          dict(self.carried_steps), dict(self.carry_checked), self._optimizer_modules(optimizers),
                          idle_optimizer, optimizer_stats, cast_stats_of(origins) if origins is not None else (),
                          _source(idle_at), frozenset(coupled), tuple(syncs),
                          frozenset(name(key) for key in compiled))

    def _optimizer_modules(self, optimizers: list) -> dict[int, list[str]]:
        """For each optimizer (index), the modules whose parameters it holds."""
        owners = self._owners()
        result = {}
        for index, optimizer in enumerate(optimizers):
            names = {self.modules.name(owners[id(p)][0]) for g in optimizer.param_groups for p in g["params"]
                     if id(p) in owners}
            result[index] = sorted(n for n in names if n)
        return result

    def _with_rank_events(self, local: tuple) -> tuple:
        """Distributed: the earliest origin over all ranks replaces later local echoes."""
        if not self.rank_events:
            return local
        first = min(self.rank_events, key=lambda e: (e["step"], e["phase"] == "backward", e["rank"]))
        op = OpStats(-1, first["op"], first["node"], first["module"], None,
                     _source((first["file"], first["line"]) if first["file"] else None), -1, 1, 1.0,
                     None, None, None, None, None, 0.0, None)
        return (NonFinite(first["phase"], first["step"], op, first["value"], first["rank"]),)

    def _function_stats(self, checks: dict):
        for check in checks.values():
            wrong = tuple({"input": v.index, "relative_error": v.relative_error, "analytic": v.analytic,
                           "numeric": v.numeric} for v in check.result.wrong)
            yield FunctionStats(check.name, self.modules.name(check.module), _source(check.where),
                                check.result.checked, check.result.note, wrong, _source(check.backward_at),
                                tuple(_source(w) for w in check.gradient_at))

    def _where(self, site: int):
        record = self.sites.sites[site]
        return self.modules.name(record.module_key), self._site_source(record)

    def _site_source(self, site):
        """Where an op ran: the first user frame, or, for a built-in layer that a torch
        container ran (a layer of an nn.Sequential), the line that constructed the layer.

        NOTE: inside a container the first user frame is the container's call, the same
        line for every layer in it; the construction line tells the layers apart."""
        if site.module_key is not None and self.origins is not None:
            info = self.modules.infos[site.module_key]
            if info.called_by_torch and type(info.module).__module__.startswith("torch."):
                built = self.origins.module_built_at(info.module)
                if built is not None:
                    return _source(built)
        return _source((site.file, site.line) if site.file else None)

    def _probe_stats(self, probes, init_sites: dict):
        losses = []
        for site, probe in probes.losses.items():
            values = probe.host()
            module, source = self._where(site)
            losses.append(LossStats(site, probe.op, probe.expects, module, source, probe.input_node,
                                    probe.input_site, probe.input_shape, probe.target_shape, probe.target_dtype, values["low"],
                                    values["high"], values["target_integral"], probe.failed, probe.detail,
                                    values["target_low"], values["target_high"]))
        inputs = []
        for site, probe in probes.inputs.items():
            mean, std = probe.host()
            module, source = self._where(site)
            inputs.append(InputStats(site, self.sites.sites[site].op, module, source, probe.count,
                                     tuple(mean), tuple(std)))
        weights = []
        owners = self._owners()
        for pid, (site, probe) in probes.weights.items():
            owner = owners.get(pid)
            module, _ = self._where(site)
            name = owner[1] if owner else "weight"
            module = self.modules.name(owner[0]) if owner else module
            weights.append(WeightStats(site, module, name, probe.kind, probe.shape, probe.fan_in, probe.fan_out,
                                       float(probe.std), bool(probe.rows_identical), _source(init_sites.get(pid))))
        return tuple(losses), tuple(inputs), tuple(weights)

    def _op_stats(self, site) -> OpStats:
        acc = self.acc.get(site.index) or _SiteAcc()
        mean = lambda total, n: 10.0 ** (total / n) if n else None  # noqa: E731
        zeroed = acc.zeroed / acc.nonzero_in if acc.nonzero_in > 0 else None
        profile = tuple(n for _, n in acc.profile) if acc.profile else None
        return OpStats(site.index, site.op, site.node, self.modules.name(site.module_key), site.module_key,
                       self._site_source(site), site.first_seq, acc.steps,
                       acc.occ / acc.steps if acc.steps else 0.0, mean(acc.log_in, acc.n_in),
                       mean(acc.log_out, acc.n_out), mean(acc.log_par, acc.n_par),
                       mean(acc.log_gain, acc.n_gain), zeroed, acc.nonzero_in, profile, dict(site.detail),
                       self.first_rms.get(site.index),
                       acc.half_zero / acc.half_numel if acc.half_numel else None,
                       acc.half_subnormal / acc.half_numel if acc.half_numel else None)

    @property
    def clean_steps(self) -> int:
        """Steps before the first NaN/Inf: the ones that describe the model."""
        return self.steps if self.first_bad_step is None else self.first_bad_step

    def local_event(self) -> dict | None:
        """This rank's first non-finite event, described without local site numbers."""
        if not self.nonfinite:
            return None
        phase, (step, site, value) = min(self.nonfinite.items(), key=lambda kv: (kv[1][0], kv[0] == "backward"))
        record = self.sites.sites[site]
        return {"phase": phase, "step": step, "value": value, "op": record.op, "node": record.node,
                "module": self.modules.name(record.module_key), "file": record.file, "line": record.line}

    def note_rank_events(self, events: list[dict]) -> None:
        if events:
            self.rank_events = events
            self.remote_events_done = True

    def _activation_stats(self, site: int, stats: UnitStats, by_site) -> ActivationStats:
        op = by_site[site]
        host = stats.host()
        if self.global_units is not None and site in self.global_units:
            merged = self.global_units[site]
            host.update({k: v.detach().cpu().double().numpy() for k, v in merged.items() if k not in ("samples", "counted")})
            stats = _with_samples(stats, merged["samples"], merged["counted"])
        clean = [s for s in self.sample_steps if self.first_bad_step is None or s < self.first_bad_step]
        window = max(1, min(self.config.dead_window_steps, math.ceil(len(clean) / 2)))
        dead, died, seen_dead, span = None, (), (), None
        if host["last_active"] is not None and clean:
            last = host["last_active"]
            cutoff = clean[-window]   # a unit that fired at a step >= cutoff is alive
            dead_mask = last < cutoff
            dead = int(dead_mask.sum())
            died, seen_dead = _death_steps(last[dead_mask], clean)
            span = (int(cutoff), int(clean[-1]))
        flat_share = stuck = None
        if host["flat"] is not None and stats.counted:
            flat_share = float(host["flat"].sum() / (stats.counted * stats.units))
            stuck = float(np.mean(host["flat"] >= 0.99 * stats.counted))
        peaked = host["peaked_rows"] / stats.rows if stats.rows else None
        return ActivationStats(site, op.op, stats.activation.family, op.module, op.source, stats.units,
                               stats.samples, dead, died, window, flat_share, stuck,
                               median_from_hist(host["hist"]), peaked, dict(stats.detail),
                               _histogram(host, stats), seen_dead, span)

    def _param_stats(self):
        owners = self._owners()
        seen = set()
        for pid, (key, pname, param) in owners.items():
            seen.add(pid)
            yield self._one_param(pid, param, key, pname)
        # NOTE: an optimizer's tensors that no module owns are named by their shape; two of
        # one shape are told apart in the order the optimizers hold them.
        shapes: dict[str, int] = defaultdict(int)
        for pid, param in self.opt_params.items():
            if pid not in seen:
                label = f"<param {tuple(param.shape)}>"
                shapes[label] += 1
                yield self._one_param(pid, param, None, label if shapes[label] == 1 else f"{label}#{shapes[label]}")

    def _one_param(self, pid, param, key, pname) -> ParamStats:
        module = self.modules.name(key) if key is not None else None
        full = f"{module}.{pname}" if module else pname
        updates = list(self.updates.get(pid, ()))
        ratios = [r for _, r, graded, _, _ in updates if r is not None and graded]
        graded_steps = [u for _, _, graded, u, _ in updates if graded]
        # NOTE: |ΔL| <= ||g|| * ||Δw|| at first order (Cauchy-Schwarz): the most one step of
        # this parameter can change the loss.
        bounds = [u * g for _, _, graded, u, g in updates if graded and g is not None and math.isfinite(u * g)]
        optimizer, group = self.param_group.get(pid, (None, None))
        where, order = self.origins.params.get(pid, (None, None)) if self.origins is not None else (None, None)
        first = self._first_optimizer_order
        return ParamStats(full, module, key, tuple(param.shape), param.requires_grad,
                          pid in self.opt_params, self.param_grad_steps.get(pid, 0),
                          self.param_last_norm.get(pid),
                          float(np.median(ratios)) if ratios else None, max(ratios) if ratios else None,
                          tuple((step, r) for step, r, graded, _, _ in updates if r is not None and graded),
                          sum(1 for u in graded_steps if u == 0), len(graded_steps), optimizer, group,
                          _source(where), order is not None and first is not None and order > first,
                          float(np.median(bounds)) if bounds else None,
                          None if key is None else (self.modules.name(self.modules.infos[key].root) or ""))


