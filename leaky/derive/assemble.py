"""End-of-run assembly: the run's record and the running sums, as frozen AuditStats.

Called once at the end of an audit, and at each check pass of a watch. It reads what
record/ kept, as one frozen RunRecord (record/run_record.py: sites, modules, units,
forward taps, cuts, origins), and what derive/accumulate.py summed, and computes each statistic
the checks read: per-op means, per-unit dead and flat shares, per-parameter update ratios,
the spectral radius of each recurrence, the per-module table.
"""
from __future__ import annotations

import dataclasses

import copy
import math
import statistics
from collections import defaultdict

import numpy as np

from leaky.derive.accumulate import SiteSums
from leaky.derive.fields import derive_all
from leaky.derive.modules import module_table
from leaky.derive.origins import cast_stats_of, optimizer_stats_of, unstepped_optimizers
from leaky.derive.recurrence import RadiusCache, find_recurrences
from leaky.record.activations import HIST_LOW, UnitStats, median_from_hist
from leaky.record.run_record import RunRecord
from leaky.stats import (ActivationStats, AuditStats, BatchMixingStats, Cut, FunctionStats, InputStats, LossStats, NonFinite,
                         OpStats, ParamStats, WeightStats, _source)


def build_stats(run: RunRecord, sums) -> AuditStats:
    """Everything a run recorded (`run`, the record's snapshot) and its running sums
    (`sums`, the StatsBuilder the record fed), as AuditStats. derive never sees the record itself."""
    return Assembly(run, sums).stats()


class Assembly:
    def __init__(self, run: RunRecord, sums) -> None:
        self.run = run
        self.builder = sums
        self.sites, self.modules, self.params = run.sites, run.modules, run.params
        self.origins = run.origins
        built = [self.origins.optimizer(o) for o in run.optimizers]
        self.first_optimizer_order = min((o.order for o in built if o.where is not None), default=None)

    def stats(self) -> AuditStats:
        run, builder = self.run, self.builder
        idle = run.optimizer_exists and not run.saw_optimizer and run.backward_calls >= 2
        places = forward_positions(self.sites)
        ops = tuple(dataclasses.replace(self._op_stats(site), position=places.get(site.index)) for site in self.sites)
        by_site = {op.site: op for op in ops}
        activations = tuple(self._activation_stats(site, units, by_site) for site, units in run.units.items())
        pairs = list(self._param_stats())
        params = tuple(p for _, p in pairs)
        orphans = {pid: p.name for pid, p in pairs if p.grad_steps and not p.in_optimizer}
        if builder.radius_cache is None:
            builder.radius_cache = RadiusCache()
        recurrences = tuple(find_recurrences(self.modules, run.param_uses, by_site, self.params.owners,
                                             builder.radius_cache, run.init_sites))
        nonfinite = tuple(NonFinite(phase, step, by_site[site], value)
                          for phase, (step, site, value) in sorted(builder.nonfinite.items(), reverse=True))
        name = self.modules.name
        # NOTE: a producer is a module key, or the name of a module that holds the roots without
        # running (its parameter was cut: `self.actor_logstd.detach()`)
        def label(keys: tuple) -> tuple:
            return tuple(k if isinstance(k, str) else name(k) for k in keys)

        cuts = tuple(Cut(c.kind, label(c.producer), name(c.module), _source(c.where), c.step,
                         None if c.reaches is None else label(c.reaches), c.order, c.site)
                     for c in run.cuts)
        types = {name(info.key) or "": info.type_name for info in self.modules.infos}
        losses_seen, inputs, weights = self._tap_stats(run.taps, run.init_sites)
        series = tuple(sorted(builder.series, key=lambda row: row.step))
        scaler = run.loss_scaler() if any(op.underflow_share is not None for op in ops) else None
        return AuditStats(
            steps=builder.steps, backward_calls=run.backward_calls, used_optimizer=bool(run.optimizers), ops=ops,
            activations=activations, params=params, recurrences=recurrences,
            nonfinite=builder.with_rank_events(nonfinite), cuts=cuts,
            losses=tuple(row.loss for row in series if row.loss is not None),
            grad_norms=tuple(row.grad_norm for row in series if row.grad_norm is not None),
            module_types=types, modules_ran=frozenset(op.module for op in ops if op.module is not None),
            clean_steps=builder.clean_steps, losses_seen=losses_seen, inputs=inputs, weights=weights,
            functions=tuple(self._function_stats(run.function_checks)), loss_scaler=scaler, series=series,
            sample_steps=tuple(builder.sample_steps), carried_steps=dict(builder.carried_steps),
            carry_checked=dict(builder.carry_checked), optimizer_modules=self._optimizer_modules(),
            idle_optimizer=idle, optimizers=optimizer_stats_of(self.origins, run.optimizers),
            unstepped_optimizers=unstepped_optimizers(self.origins, run.optimizers, orphans) if orphans else (),
            casts=cast_stats_of(self.origins), idle_source=_source(run.idle_at if idle else None),
            coupled_optimizers=run.coupled_pairs, target_syncs=run.target_syncs, target_copied=run.target_copied,
            weights_nonfinite_at=run.weights_nonfinite_at,
            compiled_modules=frozenset(name(key) for key in run.compiled_module_keys),
            module_table=module_table(ops, activations, params, recurrences, types),
            batch_mixing=tuple(self._batch_mixing(run.batch_records)),
            derived=derive_all(run, builder))

    def _batch_mixing(self, records):
        name = self.modules.name
        for r in records:
            yield BatchMixingStats(
                model=name(r.root) or "", judged=r.judged, mixed=r.mixed, note=r.note, point=r.point, batch=r.batch,
                row=r.row, reached=r.reached, pairs=r.pairs, op=r.first_op, module=name(r.first_module),
                source=_source(r.first_where), dim=r.first_dim, shape=r.first_shape, time_major=r.first_time_major,
                by_design=r.by_design,
                batchnorm_eval=tuple(name(k) or "" for k in r.batchnorm_eval))

    # -- where an op ran ---------------------------------------------------------------
    def _where(self, site: int):
        record = self.sites[site]
        return self.modules.name(record.module_key), self._site_source(record)

    def _site_source(self, site):
        """Where an op ran: the first user frame, or, for a built-in layer that a torch
        container ran (a layer of an nn.Sequential), the line that constructed the layer.

        NOTE: inside a container the first user frame is the container's call, the same
        line for every layer in it; the construction line tells the layers apart."""
        if site.module_key is not None:
            info = self.modules.infos[site.module_key]
            if info.called_by_torch and type(info.module).__module__.startswith("torch."):
                built = self.origins.module_built_at(info.module)
                if built is not None:
                    return _source(built)
        return _source((site.file, site.line) if site.file else None)

    # -- per op, per unit, per parameter -------------------------------------------------
    def _op_stats(self, site) -> OpStats:
        builder = self.builder
        acc = builder.acc.get(site.index) or SiteSums()
        mean = lambda total, n: 10.0 ** (total / n) if n else None  # noqa: E731
        return OpStats(
            site=site.index, op=site.op, node=site.node, module=self.modules.name(site.module_key),
            module_key=site.module_key, source=self._site_source(site), first_seq=site.first_seq, steps=acc.steps,
            occurrences=acc.occurrences / acc.steps if acc.steps else 0.0, grad_in=mean(acc.log_in, acc.n_in),
            grad_out=mean(acc.log_out, acc.n_out), grad_param=mean(acc.log_param, acc.n_param),
            gain=mean(acc.log_gain, acc.n_gain), zeroed_share=acc.zeroed / acc.nonzero_in if acc.nonzero_in > 0 else None,
            nonzero_in=acc.nonzero_in, profile=tuple(n for _, n in acc.profile) if acc.profile else None,
            detail=dict(site.detail), out_rms=builder.first_rms.get(site.index),
            underflow_share=acc.half_zero / acc.half_numel if acc.half_numel else None,
            subnormal_share=acc.half_subnormal / acc.half_numel if acc.half_numel else None,
            zero_steps=acc.zero_steps, loss_path=site.loss_path,
            zeroed_mass_share=min(1.0, acc.mass_zeroed / acc.mass_in) if acc.mass_in > 0 else None,
            gain_spread=_spread(acc.log_gain, acc.log_gain_squared, acc.n_gain))

    def _activation_stats(self, site: int, units: UnitStats, by_site) -> ActivationStats:
        builder, config = self.builder, self.run.config
        op = by_site[site]
        host = units.host()
        per_call = units.samples / units.calls if units.calls else None   # this rank's calls
        if builder.global_units is not None and site in builder.global_units:
            merged = builder.global_units[site]
            host.update({k: v.detach().cpu().double().numpy() for k, v in merged.items() if k not in ("samples", "counted")})
            units = _with_samples(units, merged["samples"], merged["counted"])
        clean = _ran_clean(units, builder.sample_steps, builder.first_bad_step)
        window = max(1, min(config.dead_window_steps, math.ceil(len(clean) / 2)))
        dead, died, seen_dead, span = None, (), (), None
        if host["last_active"] is not None and clean:
            last = host["last_active"]
            cutoff = clean[-window]   # a unit that fired at a step >= cutoff is alive
            dead_mask = last < cutoff
            dead = int(dead_mask.sum())
            died, seen_dead = _death_steps(last[dead_mask], clean)
            span = (int(cutoff), int(clean[-1]))
        flat_share = stuck = None
        if host["flat"] is not None and units.counted:
            flat_share = float(host["flat"].sum() / (units.counted * units.units))
            stuck = float(np.mean(host["flat"] >= config.stuck_unit_share * units.counted))
        peaked = host["peaked_rows"] / units.rows if units.rows else None
        first_rows = host.get("first_rows")
        first_flat = host["first_flat"] / first_rows if first_rows else None
        first_share = host["first_share"] / first_rows if first_rows else None
        recent = _recent_rows(host.get("recent") or [], min(config.dead_window_steps, math.ceil(units.row_steps / 2)))
        return ActivationStats(site, op.op, units.activation.family, op.module, op.source, units.units,
                               units.samples, dead, died, window, flat_share, stuck,
                               median_from_hist(host["hist"]), peaked, dict(units.detail),
                               _histogram(host, units), seen_dead, span, first_flat, first_share, *recent,
                               ran_steps=units.ran_count or None, samples_per_call=per_call,
                               **self._bypass(site))

    def _bypass(self, site: int) -> dict:
        """Where a saturating op's own input goes around it (record/bypass.py), and the gain."""
        composite, shared = self.run.bypasses.get(site, (None, None))
        total, steps = self.builder.bypass_gain.get(site, (0.0, 0))
        return {"bypass_site": composite, "bypass_input_site": shared,
                "bypass_gain": 10.0 ** (total / steps) if steps else None}

    def _param_stats(self):
        owners = self.params.owners
        seen = set()
        for pid, (key, pname, param) in owners.items():
            seen.add(pid)
            yield pid, self._one_param(pid, param, key, pname)
        # NOTE: an optimizer's tensors that no module owns are named by their shape; two of
        # one shape are told apart in the order the optimizers hold them.
        shapes: dict[str, int] = defaultdict(int)
        held = {id(param): (holder, pname) for holder, pname, param in self.modules.holder_parameters}
        for pid, param in self.params.opt_params.items():
            if pid in seen:
                continue
            if pid in held:   # owned by a module that holds the roots but never ran: named as the script names it
                yield pid, self._one_param(pid, param, None, held[pid][1], holder=held[pid][0])
                continue
            label = f"<param {tuple(param.shape)}>"
            shapes[label] += 1
            yield pid, self._one_param(pid, param, None, label if shapes[label] == 1 else f"{label}#{shapes[label]}")

    def _one_param(self, pid, param, key, pname, holder: str | None = None) -> ParamStats:
        builder, table = self.builder, self.params
        module = self.modules.name(key) if key is not None else holder
        updates = list(builder.updates.get(pid, ()))
        ratios = [r for _, r, graded, _, _ in updates if r is not None and graded]
        graded_steps = [u for _, _, graded, u, _ in updates if graded]
        # NOTE: |ΔL| <= ||g|| * ||Δw|| at first order (Cauchy-Schwarz): the most one step of
        # this parameter can change the loss.
        bounds = [u * g for _, _, graded, u, g in updates if graded and g is not None and math.isfinite(u * g)]
        optimizer, group = table.param_group.get(pid, (None, None))
        where, order = self.origins.params.get(pid, (None, None))
        first = self.first_optimizer_order
        return ParamStats(
            name=f"{module}.{pname}" if module else pname, module=module, module_key=key, shape=tuple(param.shape),
            requires_grad=param.requires_grad, in_optimizer=pid in table.opt_params,
            grad_steps=builder.param_grad_steps.get(pid, 0), grad_norm=builder.param_last_norm.get(pid),
            update_ratio=_median(ratios) if ratios else None, update_ratio_max=max(ratios) if ratios else None,
            update_ratios=tuple((step, r) for step, r, graded, _, _ in updates if r is not None and graded),
            zero_update_steps=sum(1 for u in graded_steps if u == 0), graded_update_steps=len(graded_steps),
            optimizer=optimizer, group=group, source=_source(where),
            created_after_optimizer=order is not None and first is not None and order > first,
            loss_change_bound=_median(bounds) if bounds else None,
            root=None if key is None else (self.modules.name(self.modules.infos[key].root) or ""),
            weight_norm=_median(norms) if (norms := [u / r for _, r, _, u, _ in updates if r]) else None,
            dtype=str(param.dtype).replace("torch.", ""), rounded_share=_share(builder.rounded.get(pid)))

    def _optimizer_modules(self) -> dict[int, list[str]]:
        """For each optimizer (index), the modules whose parameters it holds."""
        owners = self.params.owners
        result = {}
        for index, optimizer in enumerate(self.run.optimizers):
            names = {self.modules.name(owners[id(p)][0]) for g in optimizer.param_groups for p in g["params"]
                     if id(p) in owners}
            result[index] = sorted(n for n in names if n)
        return result

    # -- forward taps and custom Functions -------------------------------------------------------
    def _function_stats(self, checks: dict):
        for check in checks.values():
            wrong = tuple({"input": v.index, "relative_error": v.relative_error, "analytic": v.analytic,
                           "numeric": v.numeric} for v in check.result.wrong)
            yield FunctionStats(check.name, self.modules.name(check.module), _source(check.where),
                                check.result.checked, check.result.note, wrong, _source(check.backward_at),
                                tuple(_source(w) for w in check.gradient_at))

    def _tap_stats(self, taps, init_sites: dict):
        losses = []
        for site, probe in taps.losses.items():
            values = probe.host()
            module, source = self._where(site)
            losses.append(LossStats(
                site=site, op=probe.op, expects=probe.expects, module=module, source=source,
                input_node=probe.input_node, input_site=probe.input_site, input_shape=probe.input_shape,
                target_shape=probe.target_shape, target_dtype=probe.target_dtype, low=values["low"],
                high=values["high"], target_integral=values["target_integral"], failed=probe.failed,
                detail=probe.detail, target_low=values["target_low"], target_high=values["target_high"],
                start=values["start"]))
        inputs = []
        for site, probe in taps.inputs.items():
            mean, std = probe.host()
            module, source = self._where(site)
            inputs.append(InputStats(site, self.sites[site].op, module, source, probe.count,
                                     tuple(mean), tuple(std), _source(probe.made_at)))
        weights = []
        owners = self.params.owners
        for pid, (site, probe) in taps.weights.items():
            owner = owners.get(pid)
            module, _ = self._where(site)
            name = owner[1] if owner else "weight"
            module = self.modules.name(owner[0]) if owner else module
            weights.append(WeightStats(site, module, name, probe.kind, probe.shape, probe.fan_in, probe.fan_out,
                                       float(probe.std), bool(probe.rows_identical), _source(init_sites.get(pid))))
        return tuple(losses), tuple(inputs), tuple(weights)


def _spread(total: float, squared: float, n: int) -> float | None:
    """The population standard deviation of n values from their sum and sum of squares."""
    if n < 2:
        return None
    mean = total / n
    return math.sqrt(max(0.0, squared / n - mean * mean))


def _share(counts: list[float] | None) -> float | None:
    """unchanged / graded, from UpdateMeter's summed counts (None: none graded)."""
    return counts[1] / counts[0] if counts and counts[0] > 0 else None


def _recent_rows(recent: list, window: int) -> tuple:
    """(flat share, mean row's Jacobian share, (first, last) step) of a softmax's last `window`
    counted steps (UnitStats.recent); Nones when none. The mean row p̄ = Σ rows / rows has
    tr J / max tr J = (1 − ||p̄||²) / (1 − 1/n) over its n nonzero entries."""
    last = recent[-max(1, window):] if recent else []
    movable = sum(entry[1] for entry in last)
    rows = sum(entry[3] for entry in last)
    if not last or not movable or not rows:
        return None, None, None
    mean = sum(entry[4] for entry in last) / rows
    n = int(np.count_nonzero(mean))
    share = float(max(0.0, 1.0 - float(np.square(mean).sum())) / (1.0 - 1.0 / n)) if n > 1 else None
    return sum(entry[2] for entry in last) / movable, share, (int(last[0][0]), int(last[-1][0]))


def _with_samples(stats: UnitStats, samples: int, counted: int) -> UnitStats:
    merged = copy.copy(stats)
    merged.samples, merged.counted = samples, counted
    return merged


def _ran_clean(units: UnitStats, observed, first_bad: int | None) -> list[int]:
    """The observed steps before the first non-finite one at which this site ran: a layer
    that was not run at a step (trained first, then left alone; a branch taken now and then)
    says nothing there about its units. The steps a site ran at that were not observed in
    detail (a watch's unsampled steps) do not count."""
    ran = set(units.ran) if units.ran else None
    # NOTE: only the last RAN_KEPT steps a site ran at are kept: before those, assume it ran
    before = units.ran[0] if units.ran and units.ran_count > len(units.ran) else -1
    return [s for s in observed if (first_bad is None or s < first_bad) and (ran is None or s in ran or s < before)]


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


def forward_positions(sites) -> dict[int, int]:
    """Each site's place in one step's forward (0 first). A site's `after` is the op recorded
    just before it in the step where it first ran: walked depth first from the sites with
    none, each site followed by the sites recorded after it, the later-made first (a site
    new at step 8 between two sites of step 0 is nearer its predecessor than the step-0
    site that followed it then). On a step-0 chain this is first_seq's order."""
    children: dict[int | None, list] = {}
    for site in sites:
        parent = site.after if site.after is not None and site.after != site.index else None
        children.setdefault(parent, []).append(site)
    places: dict[int, int] = {}
    stack = sorted(children.get(None, []), key=lambda s: s.first_seq)   # popped last-made first
    while stack:
        site = stack.pop()
        if site.index in places:
            continue
        places[site.index] = len(places)
        stack += sorted(children.get(site.index, []), key=lambda s: s.first_seq)
    for site in sites:   # none is left out (an `after` outside the table)
        places.setdefault(site.index, len(places))
    return places


def _median(values: list[float]) -> float:
    """np.median's value for a short list of floats, without numpy's per-call cost.

    NOTE: three per parameter at every check pass: numpy's ~20-60 µs a call (and its lazy
    import of numpy.ma, ~26 ms, at a process's first median) were ~30 ms of a watch's first
    sampled step on a 22-parameter MLP. The same middle value, or the same mean of the two
    middle ones; a list holding a NaN keeps numpy's answer (a sort puts NaN anywhere)."""
    if all(map(math.isfinite, values)):
        return float(statistics.median(values))
    return float(np.median(values))
