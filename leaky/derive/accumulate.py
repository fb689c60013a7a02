"""Per-step accumulation: each sampled step's host record folded into running sums.

Memory grows with the number of ops, units and parameters, never with steps or batch
size: per site a few running sums and the last step's per-occurrence profile; per
parameter its last gradient norm and a bounded list of update ratios; the every-step
series, bounded too (a watched run's store keeps it all).
"""
from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from leaky.record.step_record import N_ACT, N_PARAM, NUMEL_IN, SEQ, SITE, HostStep, ParamNorms, UpdateNorms
from leaky.stats import SeriesRow

SERIES_LIMIT = 100_000   # per-step scalars kept in memory; a watched run's store keeps them all
UPDATE_LIMIT = 256       # sampled update ratios kept per parameter


@dataclass
class SiteSums:
    """Running sums for one site, over the clean sampled steps in which its backward ran."""

    steps: int = 0
    occurrences: int = 0                 # hook calls, summed over steps
    log_in: float = 0.0                  # sums of log10 norms: geometric means at the end
    n_in: int = 0
    log_out: float = 0.0
    n_out: int = 0
    log_param: float = 0.0
    n_param: int = 0
    log_gain: float = 0.0
    log_gain_squared: float = 0.0        # Σ (log10 gain)²: the spread of the gain over steps
    n_gain: int = 0
    nonzero_in: float = 0.0              # arriving nonzero elements, summed over the steps counted
    zeroed: float = 0.0                  # ... of them that left this op as exactly 0
    zero_steps: int = 0                  # the steps those were counted on
    profile: list[tuple[int, float]] = field(default_factory=list)   # last step: (creation order, norm in)
    half_zero: float = 0.0               # low-precision gradients arriving: exact zeros,
    half_subnormal: float = 0.0          # ... subnormals,
    half_numel: int = 0                  # ... and their element count
    mass_in: float = 0.0                 # a dead zone on the loss path: the arriving gradient's mass
    mass_zeroed: float = 0.0             # (Σ|g|), and of it, what it sent on as exactly 0


@dataclass
class SiteStep:
    """One site's hook calls in one step, combined (StepFolder._per_site)."""

    squared_in: float = 0.0
    squared_out: float = 0.0
    squared_param: float = 0.0
    occurrences: int = 0
    sends_to_activations: bool = False
    sends_to_params: bool = False
    nonzero_in: float = 0.0
    zeroed: float = 0.0
    counted: bool = False
    half_zero: float = 0.0
    half_subnormal: float = 0.0
    half_numel: int = 0
    mass_in: float = 0.0      # Σ|g| arriving (massed records only), and of it, what left as exactly 0
    mass_zeroed: float = 0.0
    profile: list[tuple[int, float]] = field(default_factory=list)   # (creation order, norm in), when > 1 call


def _log(value: float) -> float | None:
    return math.log10(value) if value > 0 and math.isfinite(value) else None


class StepFolder:
    """Folds each sampled step's HostStep (and the every-step series) into running sums."""

    def __init__(self, config) -> None:
        self.config = config
        self.steps = 0
        self.acc: dict[int, SiteSums] = defaultdict(SiteSums)
        self.series: deque[SeriesRow] = deque(maxlen=SERIES_LIMIT)   # every step, sampled or not
        self.sample_steps: deque[int] = deque(maxlen=SERIES_LIMIT)   # steps observed in detail
        # param -> (step, ratio, graded, update norm, gradient norm) on sampled steps
        self.updates: dict[int, deque] = defaultdict(lambda: deque(maxlen=UPDATE_LIMIT))
        self.zero_weight_step: dict[int, int] = {}   # param -> last step it was exactly 0
        # float16/bfloat16 param -> [elements with a nonzero gradient, of them left unchanged by
        # the step], summed over sampled steps (record/monitor.py UpdateMeter)
        self.rounded: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
        # per optimizer (index): sampled steps checked, and those whose backward calls all
        # started from the previous step's gradients
        self.carry_checked: dict[int, int] = defaultdict(int)
        self.carried_steps: dict[int, int] = defaultdict(int)
        self.nonfinite: dict[str, tuple[int, int, str]] = {}   # phase -> (step, site, "nan" | "inf" | ...)
        self.first_bad_step: int | None = None   # first step with a NaN/Inf in the forward or the loss
        self.first_rms: dict[int, float] = {}    # site -> forward output RMS, first clean step
        self.param_grad_steps: dict[int, int] = defaultdict(int)
        # saturating site -> [Σ log10 gain, steps]: its composite's gain (record/bypass.py), |dL/dx| / |dL/d(out)|
        self.bypass_gain: dict[int, list] = defaultdict(lambda: [0.0, 0])
        self.param_last_norm: dict[int, float] = {}

    @property
    def clean_steps(self) -> int:
        """Sampled steps before the first NaN/Inf: the ones that describe the model.

        NOTE: a count of sampled steps, not a step index: a watch samples steps 0, 250, 800, ...
        (the first bad one at 800 leaves 2 clean steps, not 800)."""
        if self.first_bad_step is None:
            return self.steps
        return sum(1 for step in self.sample_steps if step < self.first_bad_step)

    def add_series(self, rows) -> None:
        self.series.extend(rows)   # SeriesRow each (record/monitor.py)

    def add_step(self, step: int, host: HostStep) -> None:
        self.steps += 1
        self.sample_steps.append(step)
        self._carried(host)
        per_site = self._per_site(host)
        forward_bad = self._forward_nonfinite(step, host)
        backward_bad = self._backward_nonfinite(step, host)
        if (forward_bad or host.loss_bad) and self.first_bad_step is None:
            self.first_bad_step = step
        # NOTE: a step whose only non-finite values are gradients (a loss scaler's overflow
        # step, which the scaler skips) is left out of the sums but does not end them. Once a
        # NaN/Inf appears in the forward pass or the loss, every later statistic describes
        # the NaN, not the model: the per-site statistics keep only the steps before it.
        if self.first_bad_step is None and not backward_bad:
            self._first_rms(host)
            for site, combined in per_site.items():
                self._fold(self.acc[site], combined)
            self._fold_bypasses(host)
        graded = self._param_grads(host.params, host.values) if host.params is not None else set()
        if host.updates is not None:
            self._updates(step, host.updates, host.values, graded)

    def _carried(self, host: HostStep) -> None:
        for index, value in host.carried.items():
            self.carry_checked[index] += 1
            self.carried_steps[index] += bool(value > 0)

    def _per_site(self, host: HostStep) -> dict[int, SiteStep]:
        """Combine this step's hook calls per site: squared norms, counts, the profile.

        NOTE: numpy over all records at once (a Python loop costs per record: docs/performance.md): each
        sum runs through a site's records in their order (np.bincount adds in index order), as
        a loop would, so the sums are the same to the last bit."""
        table = host.table()
        if not len(table):
            return {}
        sites, inverse = np.unique(table[:, SITE], return_inverse=True)
        n = len(sites)
        squares = host.squared_sums()
        summed = [np.bincount(inverse, weights=squares[:, k], minlength=n).tolist() for k in range(3)]
        occurrences = np.bincount(inverse, minlength=n)
        to_acts = (np.bincount(inverse, weights=table[:, N_ACT] > 0, minlength=n) > 0).tolist()
        to_params = (np.bincount(inverse, weights=table[:, N_PARAM] > 0, minlength=n) > 0).tolist()
        counted_rows, counts, half_rows, halves = host.all_counts()
        counted_at, half_at = inverse[counted_rows], inverse[half_rows]
        nonzero_in = np.bincount(counted_at, weights=counts[:, 0], minlength=n).tolist()
        zeroed = np.bincount(counted_at, weights=np.maximum(0.0, counts[:, 0] - counts[:, 1]), minlength=n).tolist()
        counted = (np.bincount(counted_at, minlength=n) > 0).tolist()
        half_zero = np.bincount(half_at, weights=halves[:, 0], minlength=n).tolist()
        half_subnormal = np.bincount(half_at, weights=halves[:, 1], minlength=n).tolist()
        half_numel = np.bincount(half_at, weights=table[half_rows, NUMEL_IN], minlength=n).astype(np.int64).tolist()
        massed_rows, masses = host.all_masses()
        massed_at = inverse[massed_rows]
        mass_in = np.bincount(massed_at, weights=masses[:, 0], minlength=n).tolist()
        mass_zeroed = np.bincount(massed_at, weights=masses[:, 1], minlength=n).tolist()
        columns = zip(sites.tolist(), *summed, occurrences.tolist(), to_acts, to_params, nonzero_in, zeroed, counted,
                      half_zero, half_subnormal, half_numel, mass_in, mass_zeroed)
        per_site = {site: SiteStep(*fields) for site, *fields in columns}
        repeated = occurrences[inverse] > 1
        if repeated.any():   # the per-occurrence profile of a site called more than once
            rows = np.flatnonzero(repeated)
            norms = np.sqrt(squares[rows, 0])
            order = np.lexsort((norms, table[rows, SEQ], inverse[rows]))   # by site, then as sorted() would
            rows, norms = rows[order], norms[order]
            for site, seq, norm in zip(table[rows, SITE].tolist(), table[rows, SEQ].tolist(), norms.tolist()):
                per_site[site].profile.append((seq, norm))
        return per_site

    def _fold(self, acc: SiteSums, step: SiteStep) -> None:
        acc.nonzero_in += step.nonzero_in
        acc.zeroed += step.zeroed
        acc.zero_steps += step.counted
        acc.half_zero += step.half_zero
        acc.half_subnormal += step.half_subnormal
        acc.half_numel += step.half_numel
        acc.mass_in += step.mass_in
        acc.mass_zeroed += step.mass_zeroed
        norm_in = math.sqrt(step.squared_in)
        norm_out = math.sqrt(step.squared_out) if step.sends_to_activations else None
        norm_param = math.sqrt(step.squared_param) if step.sends_to_params else None
        acc.steps += 1
        acc.occurrences += step.occurrences
        # NOTE: written out, not looped over attribute names: this runs per site per step
        logged = _log(norm_in)
        if logged is not None:
            acc.log_in += logged
            acc.n_in += 1
        logged = None if norm_out is None else _log(norm_out)
        if logged is not None:
            acc.log_out += logged
            acc.n_out += 1
        logged = None if norm_param is None else _log(norm_param)
        if logged is not None:
            acc.log_param += logged
            acc.n_param += 1
        if norm_out is not None and norm_in > 0:
            gain = _log(norm_out / norm_in) if norm_out > 0 else -12.0
            if gain is not None:
                acc.log_gain += gain
                acc.log_gain_squared += gain * gain
            acc.n_gain += 1
        acc.profile = step.profile

    def _fold_bypasses(self, host: HostStep) -> None:
        """Per composite of a saturating op and its own input (record/bypass.py): the norm of the
        gradient reaching the shared input over the norm arriving at the composite's output,
        each over the step's calls (squares summed), folded as the log of their ratio."""
        if not host.bypasses:
            return
        norms = host.arriving_norms({seq for _, at_out, at_in in host.bypasses for seq in (at_out, at_in)})
        squares: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for site, at_out, at_in in host.bypasses:
            if at_out in norms and at_in in norms:
                squares[site][0] += norms[at_out] ** 2
                squares[site][1] += norms[at_in] ** 2
        for site, (out, into) in squares.items():
            if out > 0 and math.isfinite(out) and math.isfinite(into):
                sums = self.bypass_gain[site]
                sums[0] += 0.5 * math.log10(into / out) if into > 0 else -12.0
                sums[1] += 1

    def _updates(self, step: int, layout: UpdateNorms, values: np.ndarray, graded: set[int]) -> None:
        ids, offset, low = layout
        n = len(ids)
        at = offset + 2 * n
        for i, pid in enumerate(low):
            counts = self.rounded[pid]
            counts[0] += float(values[at + 2 * i])
            counts[1] += float(values[at + 2 * i + 1])
        for pid, update, weight in zip(ids, values[offset:offset + n], values[offset + n:offset + 2 * n]):
            if not (math.isfinite(update) and math.isfinite(weight)):
                continue   # after an overflow the ratio describes the overflow
            if weight == 0:
                self.zero_weight_step[pid] = step
            # NOTE: a weight that started at exactly 0 gets its scale from the first updates
            # (with momentum the second update can exceed the first weight): its ratio means
            # nothing for the few steps after.
            warmup = self.config.zero_weight_warmup
            young = step - self.zero_weight_step.get(pid, -warmup) < warmup
            ratio = float(update / weight) if weight > 0 and not young else None
            grad = self.param_last_norm.get(pid) if pid in graded else None
            self.updates[pid].append((step, ratio, pid in graded, float(update), grad))

    def _first_rms(self, host: HostStep) -> None:
        for site, norm, numel in zip(host.forward_sites, host.forward_finite, host.forward_numel):
            if site not in self.first_rms and numel:
                self.first_rms[site] = float(norm) / math.sqrt(numel)

    def _backward_nonfinite(self, step: int, host: HostStep) -> bool:
        """Note the first node that turned a finite incoming gradient non-finite.

        Backward runs nodes in decreasing creation order, so among this step's candidates
        the first to emit a non-finite gradient is the one created last.
        """
        if host.all_finite:
            return False
        candidates, any_bad = [], False
        for rec in host.records:
            leaving = host.leaving(rec)
            if np.all(np.isfinite(leaving)):
                continue
            any_bad = True
            if np.all(np.isfinite(host.arriving(rec))):
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

    def _param_grads(self, grads: ParamNorms, values: np.ndarray) -> set[int]:
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
