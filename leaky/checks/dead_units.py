"""LK102 dead-units: ReLU-family units that never fire on any observed sample.

    d/dx relu(x) = 1 if x > 0 else 0        # NOTE: PyTorch uses relu'(0) = 0

A unit whose pre-activation is <= 0 for every input gets a zero gradient for every input,
so its incoming weights never change again: it cannot recover on its own. A unit is dead
when it did not fire in the trailing window of observed steps; when it fired earlier, it
died after the last observed step where it fired and by the next observed step: the same
step in an audit, which observes every step, N steps apart under `watch(every=N)`. Some
inactive units are normal, hence the per-layer share thresholds and a minimum sample count.

A share above `dead_error` is an error only while the loss shows the harm: when the run's
one loss fell to `dead_fit_share` of its start or below, the live units carry the fit and
the finding is a warning that says so (pytorch/examples' mnist: 79% of fc1 dead after
Adadelta's first updates, 100% accuracy all the same).
"""
from __future__ import annotations

import statistics

from leaky.checks import headline, register
from leaky.checks._layers import activation_of
from leaky.checks._loss import curve_of, objectives, too_few_losses
from leaky.checks._optim import lr_cause
from leaky.checks._util import num, pct, severity_above
from leaky.config import AuditConfig
from leaky.finding import Cause, Finding, Severity
from leaky.stats import AuditStats

def _layer_params(stats: AuditStats, module: str | None) -> list:
    """The trained parameters that feed a layer's units: those of the nearest module around
    it (itself, or its parent: an nn.ReLU sits beside the Linear before it) that holds any.

    NOTE: a run may train other models with optimizers of their own (SAC's actor and its
    entropy temperature beside the critics): their updates, gradients and learning rates
    did nothing to this layer's units."""
    trained = [p for p in stats.params if p.in_optimizer]
    if module is None:
        return trained
    parts = module.split(".")
    for depth in range(len(parts), -1, -1):
        prefix = ".".join(parts[:depth])
        near = [p for p in trained if p.module is not None
                and (not prefix or p.module == prefix or p.module.startswith(prefix + "."))]
        if near:
            return near
    return trained


def _rows_of(stats: AuditStats, params: list) -> dict[int, list]:
    """Each optimizer that trains `params`: its own rows of the series, in step order."""
    optimizers = {p.optimizer for p in params}
    rows: dict[int, list] = {}
    for row in stats.series:
        if row.optimizer in optimizers or not optimizers:
            rows.setdefault(row.optimizer, []).append(row)
    return rows


def _lr_jumps(rows: dict[int, list], first: int, last: int, config: AuditConfig) -> list[tuple[int, float, float, int]]:
    """(step, lr before, lr after, optimizer) where one optimizer's own rate rose `lr_jump`×
    from its previous step to a step in [first, last]: a jump is one optimizer's (a run with
    several optimizers alternates their rates, which is no jump)."""
    jumps = []
    for optimizer, own in rows.items():
        for before, row in zip(own, own[1:]):
            if (first <= row.step <= last and before.lr and row.lr is not None
                    and row.lr > config.lr_jump * before.lr):
                jumps.append((row.step, before.lr, row.lr, optimizer))
    return sorted(jumps, key=lambda jump: jump[0])


def _just_before(stats: AuditStats, first: int, last: int, config: AuditConfig, params: list) -> str:
    """What happened on the steps whose updates could have killed most units (the step of
    their last firing, up to the step before they were seen silent): Karpathy's 'knocked off
    by a large update' is a gradient spike, a large update, or a learning-rate step. Only
    what reached this layer counts: its own parameters' updates, and the gradient norms and
    learning rates of the optimizers that train them."""
    rows = _rows_of(stats, params)
    steps = {row.step: row for own in rows.values() for row in own}
    span = [step for step in range(first, last + 1) if step in steps]
    if first < 0 or not span:
        return ""
    events = []
    norms = [row.grad_norm for row in steps.values() if row.grad_norm is not None and row.step < first]
    spiked = [(steps[s].grad_norm, s) for s in span if steps[s].grad_norm is not None]
    if spiked and norms:
        typical = statistics.median(norms)
        norm, step = max(spiked)
        if typical > 0 and norm > config.dead_spike_factor * typical:
            events.append((step, f"the gradient norm spiked to {norm:.3g} ({norm / typical:.0f}× its median)"))
    jumps = _lr_jumps(rows, first, last, config)
    if jumps:
        step, before, after, _ = jumps[0]
        events.append((step, f"the learning rate jumped from {before:.3g} to {after:.3g}"))
    ratios = [(r, s) for p in params for s, r in p.update_ratios if first <= s <= last]
    if ratios and max(ratios)[0] > config.dead_large_update:
        events.append((max(ratios)[1], f"an update changed a weight by {max(ratios)[0]:.2g}× its norm"))
    return _events_text(events, first, last)


def _culprit(stats: AuditStats, died: list[int] | None, config: AuditConfig, params: list) -> Cause | None:
    """The learning rate's line, when the units died right after a large update or a jump
    of the learning rate (the events `_just_before` names): the rate is what to change."""
    if not died:
        return None
    first, last = died[0] - 1, died[1] - 1
    ratios = [(r, s, p) for p in params for s, r in p.update_ratios if first <= s <= last]
    if ratios:
        ratio, _, param = max(ratios, key=lambda item: item[0])
        if ratio > config.dead_large_update:
            return lr_cause(stats, param, "high", config)
    jumps = _lr_jumps(_rows_of(stats, params), first, last, config)
    if jumps:
        optimizer = jumps[0][3]
        param = next((p for p in params if p.optimizer == optimizer), None)
        return None if param is None else lr_cause(stats, param, "high", config)
    return None


def _events_text(events: list[tuple[int, str]], first: int, last: int) -> str:
    if first == last:
        if not events:
            return f" Nothing unusual was measured at step {first}."
        return f" Just before, at step {first}, " + " and ".join(text for _, text in events) + "."
    if not events:
        return f" Nothing unusual was measured between steps {first} and {last}."
    happened = [f"{text} at step {step}" for step, text in sorted(events)]
    return f" Between steps {first} and {last}, " + _joined(happened) + "."


def _joined(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _when(stats: AuditStats, act, config: AuditConfig, params: list) -> tuple[str, int | None, list[int] | None]:
    """The sentence on when the dead units that fired earlier died, the step a finding
    points at (the earliest a unit may have died), and the range of steps they died in.

    NOTE: every step number is an optimizer step. Under a watch, units are observed every
    N-th step: each died after the last observed step where it fired (died_steps - 1) and
    by the next observed step (seen_dead_steps). An audit observes every step: the two agree."""
    deaths = sorted(zip(act.died_steps, act.seen_dead_steps or act.died_steps))
    if not deaths:
        return "", None, None
    earliest, latest = deaths[0][0], max(seen for _, seen in deaths)
    exact = all(died == seen for died, seen in deaths)
    text = _exact_when(stats, deaths, config, params) if exact else _sampled_when(stats, deaths, config, params)
    return f" {len(deaths)} of them fired earlier and {text}", earliest, [earliest, latest]


def _exact_when(stats: AuditStats, deaths: list[tuple[int, int]], config: AuditConfig, params: list) -> str:
    first, last = deaths[0][0], deaths[-1][0]
    median = statistics.median(died for died, _ in deaths)
    when = f"died at step {first}" if first == last else f"died between steps {first} and {last} (median {median:g})"
    return f"{when}.{_just_before(stats, int(median) - 1, int(median) - 1, config, params)}"


def _sampled_when(stats: AuditStats, deaths: list[tuple[int, int]], config: AuditConfig, params: list) -> str:
    earliest, latest = deaths[0][0], max(seen for _, seen in deaths)
    died, seen = deaths[len(deaths) // 2]
    if (died, seen) == (earliest, latest):
        observed = f": they fired at observed step {died - 1} and were silent at observed step {seen}."
    else:
        observed = f"; the median unit fired at observed step {died - 1} and was silent at observed step {seen}."
    return f"died between steps {earliest} and {latest}{observed}{_just_before(stats, died - 1, seen - 1, config, params)}"


def _window(act) -> str:
    """The trailing window's steps, when they are not simply the last `window` steps."""
    if act.window_span is None or act.window_span[1] - act.window_span[0] + 1 == act.window:
        return ""
    first, last = act.window_span
    return f" (steps {first} to {last})" if act.window > 1 else f" (step {last})"


_FIX = ("Lower the learning rate or add warmup (a large update pushes biases far negative), "
        "initialise with nn.init.kaiming_normal_(w, nonlinearity='relu'), normalise the inputs, "
        "or use LeakyReLU/GELU, whose gradient is nonzero for x < 0.")
_FIX_FROM_START = ("No update killed most of these units: they never fired. Centre the layer's inputs (a layer fed "
                   "only non-negative values, such as another ReLU's outputs, can start with units negative on every "
                   "sample), initialise with nn.init.kaiming_normal_(w, nonlinearity='relu') and a zero or small "
                   "positive bias, or use LeakyReLU/GELU, whose gradient is nonzero for x < 0.")


def _from_start_text(from_start: int, dead: int) -> str:
    """The dead units that never fired on any observed sample, in a sentence."""
    if from_start <= 0:
        return ""
    if from_start == dead:
        return " None of them fired on any observed sample: they were dead from the first observed step."
    return f" The other {from_start} never fired on any observed sample: dead from the first observed step."


@register("LK102", "dead-units", "ReLU-family units that never activate on any observed sample")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    verdict = None
    for act in stats.activations:
        if act.dead_units is None or not act.units:
            continue
        window_samples = act.samples * act.window // max(act.ran_steps or stats.steps, 1)
        # NOTE: samples are counted over the steps this layer ran at; per step they are the
        # same, so this is the number of samples of one unit in the trailing window. A step
        # that runs the layer once per sample of a sequence (an episode's states, one at a
        # time) gives consecutive, alike samples, not independent draws: silence on them says
        # the unit does not fire on that stretch of inputs, not on the data. The evidence is
        # counted as the window's steps times the samples of one call (its batch).
        independent = window_samples if act.samples_per_call is None else \
            min(window_samples, act.window * act.samples_per_call)
        if independent < config.dead_min_samples:
            continue
        share = act.dead_units / act.units
        severity = severity_above(share, config.dead_warning, config.dead_error)
        if severity is None and share >= config.dead_info:
            severity = Severity.INFO
        if severity is None:
            continue
        fit, undecided = None, ""
        if severity is Severity.ERROR:
            verdict = verdict or _loss_verdict(stats, config)   # once per check, not per layer
            fit, undecided = verdict
            if fit is not None:
                severity, undecided = Severity.WARNING, ""
        params = _layer_params(stats, act.module)
        when, step, died_between = _when(stats, act, config, params)
        from_start = act.dead_units - len(act.died_steps)
        # NOTE: an update can only be blamed for the units it killed: when most of the dead
        # units never fired on any observed step (a layer fed only non-negative inputs, such
        # as another ReLU's outputs, whose units start negative on every sample), the learning
        # rate is not their cause.
        cause = _culprit(stats, died_between, config, params) if 2 * from_start <= act.dead_units else None
        when += _from_start_text(from_start, act.dead_units)
        message = (f"{pct(share)} of {act.module or 'this layer'}'s {act.units} {act.op} units "
                   f"({act.dead_units}) output 0 for all ~{window_samples} samples of the last "
                   f"{act.window} observed steps{_window(act)}; relu'(x) = 0 for x ≤ 0, so they get no "
                   f"gradient and cannot recover.{when}")
        if fit is not None:
            message += (f" The loss fell from {num(fit[0])} (its least in the first tenth of the run) to "
                        f"{num(fit[1])} (the mean of its last tenth) all the same: the live units carry the fit, "
                        "and the dead ones are capacity lost (a warning, not an error).")
        fix = _FIX_FROM_START if 2 * from_start > act.dead_units else _FIX
        evidence = {"dead_units": act.dead_units, "units": act.units, "dead_share": share,
                    **({"loss_start": fit[0], "loss_end": fit[1]} if fit is not None else {}),
                    **({"provisional": undecided} if undecided else {}),
                    "window_steps": act.window, "window_samples": window_samples,
                    "died_during_observation": len(act.died_steps), "dead_from_start": from_start,
                    "first_death_step": step,
                    "died_between_steps": died_between}
        findings.append(Finding("dead-units", "LK102", severity, message, fix, act.module, act.op,
                                act.source, step, evidence, cause))
    return findings


def _loss_verdict(stats: AuditStats, config: AuditConfig) -> tuple[tuple[float, float] | None, str]:
    """What the run's one loss says of an error: (start, end) when it ended at or below
    `dead_fit_share` of where it began (the live units carry the fit: a warning), else None;
    and why the error is provisional when the loss has too few steps yet to tell (a watch's
    early pass neither announces it nor stops a --fail-fast run on it), else ''. Not judged
    with several objectives (whose loss trains this layer is not known here).

    NOTE: the end is the mean of its last tenth (checks/_loss.py); the start the least of its
    first tenth, so that a loss that blew up in its first steps (a rate far too high: 2.3 →
    317 → back to 2.3, chance) is not read as one that fell."""
    found = objectives(stats, config)
    if len(found) != 1:
        return None, ""
    rows = found[0].rows
    undecided = too_few_losses(stats, found[0].optimizer, config)
    curve = curve_of(rows, config.loss_min_steps)
    if curve is None or curve.nonfinite_step is not None or not curve.end >= 0:
        return None, undecided
    start = min(loss for _, loss in rows[:max(3, len(rows) // 10)])
    return ((start, curve.end) if start > 0 and curve.end <= config.dead_fit_share * start else None), undecided


@headline("LK102", "dead units")
def _headline(finding: Finding, stats: AuditStats):
    act = activation_of(finding, stats)
    return f"{act.dead_units}/{act.units}" if act is not None and act.dead_units is not None else None
