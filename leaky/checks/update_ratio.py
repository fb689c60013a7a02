"""LK202 update-ratio: ||dw|| / ||w|| per step, per layer, far from the useful band.

The ratio of the update to the weight says how fast a layer changes: about 1e-3 per step
is the classic rule of thumb (Karpathy, CS231n). Far above it, each step rewrites a good
part of the weight: the learning rate is too high for that layer. At 1 or more the update
is larger than the weight itself. Far below it on every sampled step, the layer is
effectively frozen: the learning rate is too low, or its gradients vanish. Only weight
matrices and kernels (two or more dims larger than 1) are judged: biases, and vectors kept
as rows (a Gaussian policy's (1, D) log-std, a (1, C, 1, 1) bias), often start at 0 and then
hold only what their updates made them, so that ||Δw||/||w|| does not depend on the rate
(scale lr and both scale); a single number's ratio is unbounded where it crosses 0.
The finding points at the line that set the rate: the optimizer's construction, or the
scheduler that moved the rate there.

Advice about the rate must agree with the loss. Above the band while the loss is still
falling (its last third of the observed steps clearly below its middle third), the rate
trains: that is information, not a fault. Below the band from some step on, after the rate
in force fell there (a scheduler stepped per batch where its steps meant epochs), the
weights stopped training for the rest of the run: a warning when the loss stayed flat over
those steps, quoting the rate in force there, not the one the optimizer was built with, and
naming the line that advances the scheduler.

The band assumes one step() is one update from one gradient, scaled by lr (leaky/optimizers.py).
A quasi-Newton step (LBFGS: up to max_iter iterations with a line search per step(closure)),
any step whose closure ran more than once, and Rprop's self-adapting step sizes are not:
their parameters are not judged here, and the run's notes say so.
"""
from __future__ import annotations

import math
import statistics

from leaky.checks import headline, note, register
from leaky.checks._collapse import collapsed_optimizers
from leaky.checks._loss import change_bound, curve_of, objectives, too_few_losses
from leaky.checks._optim import (group_lrs, lr_cause, lr_origin, lrs_in_force, optimizer_label, optimizer_of,
                                 stepped_every_batch)
from leaky.checks._util import line_of, num, severity_above
from leaky.config import AuditConfig
from leaky.finding import Cause, Finding, Severity
from leaky.optimizers import rule_of
from leaky.stats import AuditStats, ParamStats


@register("LK202", "update-ratio", "the update/weight ratio is far from ~1e-3 (learning rate too high or too low)")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    slow: dict[tuple, list[tuple[ParamStats, dict]]] = {}
    decayed: dict[tuple, list[tuple[ParamStats, dict]]] = {}
    for param in stats.params:
        if not _matrix(param.shape) or param.update_ratio is None or len(param.update_ratios) < config.update_min_steps:
            continue
        optimizer = optimizer_of(stats, param)
        if optimizer is not None and not rule_of(optimizer).banded:
            continue
        severity = _high_severity(param, config, stats)
        if severity is not None:
            findings.append(_high(param, severity, config, stats))
        elif (measure := _slow(param, config, stats)) is not None:
            slow.setdefault((param.optimizer, param.group), []).append((param, measure))
        elif param.update_ratio_max is not None and 0 < param.update_ratio_max < config.update_low:
            findings.append(_low(param, config, stats))
        elif (stretch := _frozen_after_decay(param, config, stats)) is not None:
            decayed.setdefault((param.optimizer, param.group), []).append((param, stretch))
    findings.extend(_too_slow(group, config, stats) for group in slow.values())
    findings.extend(_decayed(group, config, stats) for group in decayed.values())
    return findings


def _matrix(shape: tuple[int, ...]) -> bool:
    """A weight matrix or kernel: two or more dims larger than 1 ((1, D) is a vector)."""
    return sum(1 for size in shape if size > 1) >= 2


def _high_severity(param: ParamStats, config: AuditConfig, stats: AuditStats):
    """Error when the update outgrew the weight itself on `update_error_overshoots` (two) or
    more steps (a blow-up is often over in a few steps, which a median would hide); warning
    when it did on fewer, or when the typical step is above the band. An Adam-family first
    update is lr × sign(g) per element by construction (leaky/optimizers.py): outgrowing the
    weight there, when the loss after it was no higher than before it, says only that the rate
    is large against the init's scale, an info; a blow-up shows on the steps after it."""
    first = _sign_first_step(param, stats)
    overshoots = sum(1 for step, ratio in param.update_ratios if ratio > config.update_high_error and step != first)
    if overshoots >= config.update_error_overshoots:
        return Severity.ERROR
    if overshoots:
        return Severity.WARNING
    typical = severity_above(param.update_ratio, config.update_high_warning, math.inf)
    if typical is None and first is not None and param.update_ratios[0][1] > config.update_high_error:
        return Severity.INFO
    return typical


def _sign_first_step(param: ParamStats, stats: AuditStats) -> int | None:
    """The step of this weight's first observed update, when it is its optimizer's first step,
    the optimizer's rule makes that step lr × sign(g) per element, and the loss after it was
    no higher than the loss before it (the step did no harm that the run shows); else None."""
    optimizer = optimizer_of(stats, param)
    if optimizer is None or not rule_of(optimizer).sign_first_step or not param.update_ratios:
        return None
    rows = [row for row in stats.series if row.optimizer == optimizer.index][:2]
    step = param.update_ratios[0][0]
    if len(rows) < 2 or rows[0].step != step or rows[0].loss is None or rows[1].loss is None:
        return None
    # NOTE: a step's loss is computed before its update: the next row's is the loss after it
    return step if rows[1].loss <= rows[0].loss else None


def _first_step_only(param: ParamStats, message: str, source, origin: str, config: AuditConfig,
                     stats: AuditStats) -> Finding:
    """Info: only the optimizer's first update, lr × sign(g) per element, outgrew the weight."""
    optimizer = optimizer_of(stats, param)
    later = [ratio for _, ratio in param.update_ratios[1:]]
    message += (f": only the first update, which {optimizer.kind} makes lr × sign(g) per element whatever the "
                f"gradient, so that its size is set by the learning rate against the weight's initial scale; the "
                f"{len(later)} sampled steps after it changed {param.name} by at most {num(max(later, default=0.0))}× "
                f"its norm.")
    fix = ("Nothing to change while the loss falls; if the first steps upset training, warm the learning rate up "
           "over them, or initialise the weight at a larger scale.")
    return Finding("update-ratio", "LK202", Severity.INFO, message + origin, fix, param.module, None, source,
                   param.update_ratios[-1][0], {**_evidence(param, config), "direction": "high",
                                                "first_step_only": True}, None)


def _band(config: AuditConfig) -> str:
    return f"[{num(config.update_low)}, {num(config.update_high_warning)}]"


def _high(param: ParamStats, severity, config: AuditConfig, stats: AuditStats) -> Finding:
    overshoots = [(s, r) for s, r in param.update_ratios if r > config.update_high_error]
    worst = f"; at step {overshoots[0][0]} the update was {num(overshoots[0][1])}× the weight itself" \
        if overshoots else ""
    message = (f"steps change {param.name} by a median {num(param.update_ratio)}× its norm (||Δw||/||w|| over "
               f"{len(param.update_ratios)} sampled steps, at most {num(param.update_ratio_max)}; ~1e-3 is typical, "
               f"leaky's band is {_band(config)}){worst}")
    source, origin = lr_origin(stats, param, "high", config)
    falling = _still_falling(stats, param.optimizer, config)
    collapse = _collapse_clause(stats, param.optimizer, config, falling)
    if collapse:
        falling = ""    # NOTE: −log p(a)·A falls toward 0 as p(a) → 1 whether the return improves or not
    undecided = "" if falling else too_few_losses(stats, param.optimizer, config)
    if severity is Severity.INFO and not falling:
        return _first_step_only(param, message, source, origin, config, stats)
    if falling:
        # NOTE: advice must agree with the loss: a rate that still lowers it is not too high.
        message += f": a high learning rate for this layer, yet {falling} so it trains."
        severity = Severity.INFO
        fix = ("Nothing to change while the loss keeps falling; if it stalls, oscillates or rises later, lower "
               "this layer's rate (a param group of its own) or warm the rate up.")
    else:
        message += ": the learning rate is too high for this layer." + collapse
        fix = ("Lower the learning rate (×0.1), or give this layer its own param group with a smaller lr; "
               "a warmup schedule helps when the ratio is high only at the start.")
    return Finding("update-ratio", "LK202", severity, message + origin, fix, param.module, None, source,
                   param.update_ratios[-1][0], {**_evidence(param, config), "direction": "high",
                                                **({"provisional": undecided} if undecided else {}),
                                                "loss_still_falling": bool(falling), "collapsed_output": bool(collapse)},
                   None if falling else lr_cause(stats, param, "high", config))


def _slow(param: ParamStats, config: AuditConfig, stats: AuditStats) -> dict | None:
    """An Adam-family weight whose learning rate is too small for it ever to change: its
    rule moves each element by about lr per step at most, so ||Δw||/||w|| <~ lr / rms(w)
    (lr alone, whatever the gradient); neither that bound nor any sampled step comes near a
    `update_material_change` move in `update_slow_steps` steps. Returns the numbers."""
    optimizer = optimizer_of(stats, param)
    if optimizer is None or not rule_of(optimizer).per_element_lr or not param.weight_norm:
        return None
    _, seen = group_lrs(optimizer, param.group)
    if seen is None or not seen[1] > 0:
        return None
    rms = param.weight_norm / math.sqrt(math.prod(param.shape))
    bound = seen[1] / rms
    target = config.update_material_change / config.update_slow_steps
    if bound >= target or param.update_ratio_max is None or param.update_ratio_max >= target:
        return None
    change = config.update_material_change
    measured = param.update_ratio
    return {"lr": seen[1], "weight_rms": rms, "ratio_bound": bound,
            "steps_to_change": change / measured if measured else math.inf,
            "steps_to_change_at_bound": change / bound, "material_change": change}


def _too_slow(slow: list[tuple[ParamStats, dict]], config: AuditConfig, stats: AuditStats) -> Finding:
    """One finding per param group whose weights are too slow: it names the fastest of them
    (the most the rate can do), and the learning rate's line."""
    param, measure = max(slow, key=lambda item: item[1]["ratio_bound"])
    optimizer = optimizer_of(stats, param)
    rule = rule_of(optimizer)
    change, measured = measure["material_change"], param.update_ratio
    others = (f" The same holds for {len(slow) - 1} more weight(s) of its param group "
              f"({', '.join(p.name for p, _ in slow if p is not param)[:200]}), which move even more slowly."
              if len(slow) > 1 else "")
    message = (f"{optimizer.kind} moves each element of a weight by about lr per step at most ({rule.update}), "
               f"so ||Δw||/||w|| <~ lr / rms(w) = {num(measure['lr'])} / {num(measure['weight_rms'])} = "
               f"{num(measure['ratio_bound'])} for {param.name}; the sampled steps changed it by a median "
               f"{num(measured)}× its norm (at most {num(param.update_ratio_max)}). At that rate it needs "
               f"~{_count(measure['steps_to_change'])} steps to change by {100 * change:g}% "
               f"(~{_count(1 / measured if measured else math.inf)} to move by its own norm), and at least "
               f"{_count(measure['steps_to_change_at_bound'])} even if every step moved it the most the rule allows: "
               f"the learning rate is too small for it to train.{others}")
    severity, falls = _falling(stats, param.optimizer, config)
    undecided = "" if severity is Severity.INFO else too_few_losses(stats, param.optimizer, config)
    source, origin = lr_origin(stats, param, "low", config)
    fix = (f"Raise the learning rate: with {optimizer.kind}, lr ≈ 1e-3 × rms(w) (here ~{num(1e-3 * measure['weight_rms'])}) "
           "moves a weight by ~1e-3× its norm per step; 1e-4 to 1e-3 is usual from scratch, 1e-5 for fine-tuning.")
    evidence = {**_evidence(param, config), "direction": "low", "rule": "lr bound", **measure,
                "slow_parameters": [p.name for p, _ in slow], **({"provisional": undecided} if undecided else {})}
    return Finding("update-ratio", "LK202", severity, message + origin + falls, fix, param.module, None, source,
                   param.update_ratios[-1][0], evidence, lr_cause(stats, param, "low", config))


def _falling(stats: AuditStats, index: int | None, config: AuditConfig) -> tuple[Severity, str]:
    """Warning while this optimizer's loss does not fall; info, saying so, while it falls by
    `loss_flat_share` or more over the observed steps: tiny steps that still lower the loss
    can be by design (fine-tuning that must stay near its start)."""
    objective = next((o for o in objectives(stats, config) if o.optimizer == index), None)
    curve = None if objective is None else curve_of(objective.rows, config.loss_min_steps)
    if curve is None or not (math.isfinite(curve.start) and math.isfinite(curve.end)) or curve.start == 0:
        return Severity.WARNING, ""
    drop = (curve.start - curve.end) / abs(curve.start)
    if drop < config.loss_flat_share:
        return Severity.WARNING, ""
    # NOTE: |ΔL| per step <= Σ ||g||·||Δw|| at first order: a drop the updates could not have
    # made even a tenth of (loss_stuck_share) is the batches' noise, not learning.
    bound = change_bound(stats, objective)
    if bound is not None and bound * curve.steps < config.loss_stuck_share * drop * abs(curve.start):
        return Severity.WARNING, (f" The loss moved {100 * drop:.1f}% over the {curve.steps} observed steps, but at "
                                  f"first order the updates could change it by at most Σ ||g||·||Δw|| = {num(bound)} "
                                  f"per step ({num(bound * curve.steps)} in all): that change is the batches' noise, "
                                  "not learning.")
    return Severity.INFO, (f" The loss still fell {100 * drop:.1f}% over the {curve.steps} observed steps, so steps "
                           "this small may be by design (fine-tuning that must stay near its start).")


def _count(steps: float) -> str:
    """A step count in words: 12,000 / 3.4 million / never."""
    if not math.isfinite(steps):
        return "infinitely many"
    if steps >= 1e6:
        return f"{steps / 1e6:.2g} million"
    return f"{int(round(steps, -2 if steps >= 1e3 else 0)):,}"


def _low(param: ParamStats, config: AuditConfig, stats: AuditStats) -> Finding:
    message = (f"no sampled step changed {param.name} by more than {num(param.update_ratio_max)}× its norm "
               f"(||Δw||/||w||; ~1e-3 is typical, leaky's band is {_band(config)}): the layer is effectively "
               "frozen, because the learning rate is too low or its gradients vanish.")
    source, origin = lr_origin(stats, param, "low", config)
    fix = ("Raise the learning rate (×10) for this layer's param group; if its gradients are tiny, see "
           "LK103 vanishing-gradient for where they are lost.")
    # NOTE: a frozen weight is the learning rate's doing for sure only under a rule whose
    # step lr alone sets (Adam's); under SGD's lr·||g|| vanishing gradients freeze it too.
    optimizer = optimizer_of(stats, param)
    by_lr = optimizer is not None and rule_of(optimizer).per_element_lr
    return Finding("update-ratio", "LK202", Severity.WARNING, message + origin, fix, param.module, None, source,
                   param.update_ratios[-1][0], {**_evidence(param, config), "direction": "low", "rule": "frozen"},
                   lr_cause(stats, param, "low", config) if by_lr else None)


def _evidence(param: ParamStats, config: AuditConfig) -> dict:
    return {"parameter": param.name, "median_ratio": param.update_ratio, "max_ratio": param.update_ratio_max,
            "band": [config.update_low, config.update_high_warning], "sampled_steps": len(param.update_ratios),
            "ratios": [{"step": s, "ratio": r} for s, r in param.update_ratios[-16:]]}


def _still_falling(stats: AuditStats, index: int | None, config: AuditConfig) -> str:
    """A clause when this optimizer's loss is still falling: the mean of the last third of
    its observed steps below the middle third's by `loss_flat_share` of the first's and by
    more than twice the standard error of the difference (minibatch noise). Else ''."""
    objective = next((o for o in objectives(stats, config) if o.optimizer == index), None)
    if objective is None or objective.competing or objective.moving_target:
        return ""
    losses = [loss for _, loss in objective.rows]
    if len(losses) < config.loss_min_steps or not all(math.isfinite(loss) for loss in losses):
        return ""
    third = len(losses) // 3
    first, middle, last = losses[:third], losses[third:2 * third], losses[-third:]
    level = [statistics.fmean(part) for part in (first, middle, last)]
    noise = math.sqrt((statistics.variance(middle) + statistics.variance(last)) / third)
    fall = level[1] - level[2]
    if not (fall > 2 * noise and fall >= config.loss_flat_share * abs(level[0])):
        return ""
    return (f"the loss is still falling (means of the thirds of its {len(losses)} observed steps: "
            f"{num(level[0])}, {num(level[1])}, {num(level[2])}),")


def _collapse_clause(stats: AuditStats, index: int | None, config: AuditConfig, falling: str) -> str:
    """Why the falling loss (`falling`, `_still_falling`'s clause) is no evidence of training,
    when an output softmax on this optimizer's loss collapsed (checks/_collapse.py, LK101);
    else ''."""
    if not falling or index is None or index not in collapsed_optimizers(stats, config):
        return ""
    return (f" {falling[0].upper()}{falling[1:]} but an output softmax on its path collapsed onto one entry (LK101), "
            "and a policy-gradient loss −log p(a)·A falls toward 0 as p(a) → 1 whether the return improves or not: "
            "its fall is no evidence that this layer trains.")


def _frozen_after_decay(param: ParamStats, config: AuditConfig, stats: AuditStats) -> dict | None:
    """A weight that moved, then stayed below `update_low` on every sampled step from some step
    on (at least `update_frozen_share` of them), after the learning rate in force fell
    `scheduler_moved` (2×) or more below the highest it had before. Returns the stretch."""
    ratios = param.update_ratios
    tail = next((i for i, (_, ratio) in enumerate(reversed(ratios)) if ratio >= config.update_low), len(ratios))
    if tail == len(ratios) or tail < config.update_min_steps or tail < config.update_frozen_share * len(ratios):
        return None
    before, frozen = ratios[:-tail], ratios[-tail:]
    lrs = lrs_in_force(stats, param)
    lr_before = max((lrs[s] for s, _ in before if s in lrs), default=None)
    lr_frozen = [(s, lrs[s]) for s, _ in frozen if s in lrs]
    if lr_before is None or not lr_frozen or max(lr for _, lr in lr_frozen) * config.scheduler_moved >= lr_before:
        return None
    return {"frozen_from": frozen[0][0], "frozen_to": frozen[-1][0], "frozen_sampled_steps": tail,
            "frozen_max_ratio": max(r for _, r in frozen), "before_max_ratio": max(r for _, r in before),
            "lr_before": lr_before, "lr_at_freeze": lr_frozen[0][1], "lr_last": lr_frozen[-1][1],
            "lr_last_step": lr_frozen[-1][0]}


def _decayed(frozen: list[tuple[ParamStats, dict]], config: AuditConfig, stats: AuditStats) -> Finding:
    """One finding per param group whose weights froze after the rate decayed: it names the
    weight frozen longest, the rate in force, the scheduler and how often it was stepped."""
    param, stretch = min(frozen, key=lambda item: item[1]["frozen_from"])
    optimizer = optimizer_of(stats, param)
    others = (f" So did {', '.join(p.name for p, _ in frozen if p is not param)[:200]}."
              if len(frozen) > 1 else "")
    message = (f"{param.name} stopped changing at step {stretch['frozen_from']}: on each of the "
               f"{stretch['frozen_sampled_steps']} sampled steps from there to step {stretch['frozen_to']} "
               f"({len(param.update_ratios)} sampled in all), ||Δw||/||w|| stayed below {num(stretch['frozen_max_ratio'])} "
               f"(leaky's band is {_band(config)}; up to {num(stretch['before_max_ratio'])} before). The learning "
               f"rate in force fell from {num(stretch['lr_before'])} to {num(stretch['lr_at_freeze'])} at step "
               f"{stretch['frozen_from']} and {num(stretch['lr_last'])} by step {stretch['lr_last_step']}.{others}")
    per_batch = optimizer.scheduler is not None and stepped_every_batch(stats, optimizer)
    setter, cause, fix = _decay_setter(stats, param, stretch, per_batch, config)
    severity, loss = _stalled(stats, param.optimizer, stretch["frozen_from"], config)
    evidence = {**_evidence(param, config), "direction": "low", "rule": "decayed", **stretch,
                "frozen_parameters": [p.name for p, _ in frozen], "scheduler_per_batch": per_batch}
    source = cause.source if cause is not None else None
    return Finding("update-ratio", "LK202", severity, message + setter + loss, fix, param.module, None, source,
                   param.update_ratios[-1][0], evidence, cause)


def _decay_setter(stats: AuditStats, param: ParamStats, stretch: dict, per_batch: bool,
                  config: AuditConfig) -> tuple[str, Cause | None, str]:
    """Who brought the rate down, in a sentence; the line to change; the fix."""
    optimizer = optimizer_of(stats, param)
    scheduler, rate = optimizer.scheduler, num(stretch["lr_last"])
    initial, _ = group_lrs(optimizer, param.group)
    built = (f" from the {num(initial)} {optimizer.kind} was built with ({line_of(optimizer.source)})"
             if initial is not None and optimizer.source else "")
    if scheduler is not None and per_batch:
        steps = sum(1 for row in stats.series if row.optimizer == optimizer.index)
        where = scheduler.step_source or scheduler.source
        at = f" at {line_of(scheduler.step_source)}" if scheduler.step_source else ""
        made = f" (built at {line_of(scheduler.source)})" if scheduler.source else ""
        return (f" {scheduler.kind}{made} took it there{built}: its step(){at} ran {scheduler.step_calls} times in "
                f"{steps} optimizer steps, once per batch, so each of its steps is a batch, not an epoch.",
                Cause.at(where, f"{scheduler.kind}.step() runs here once per batch: it made the learning rate {rate}"),
                f"Call {scheduler.kind}.step() once per epoch, after the batch loop, as its step counts were meant; "
                "or count its schedule in batches (e.g. step_size × batches per epoch).")
    fix = ("Keep the learning rate from decaying this far while training goes on: check the schedule's decay "
           "(gamma, milestones, T_max) against how many times it is stepped, or give it a floor (eta_min).")
    if scheduler is not None:
        _, origin = lr_origin(stats, param, "low", config)
        return origin, lr_cause(stats, param, "low", config), fix
    where = optimizer.source
    return (f" No scheduler leaky saw set it{built}: the script lowers param_groups' lr itself.",
            Cause.at(where, f"{optimizer.kind} built here; the learning rate in force fell to {rate}"), fix)


def _stalled(stats: AuditStats, index: int | None, start: int, config: AuditConfig) -> tuple[Severity, str]:
    """Warning when the loss stayed flat (less than `loss_flat_share` lower) from `start` on,
    above the level it had fallen to: training stopped there. Info otherwise, saying why."""
    objective = next((o for o in objectives(stats, config) if o.optimizer == index), None)
    rows = [] if objective is None else [(s, loss) for s, loss in objective.rows if s >= start]
    curve = curve_of(rows, config.loss_min_steps) if rows else None
    if curve is None or not (math.isfinite(curve.start) and math.isfinite(curve.end)) or curve.start == 0:
        return Severity.INFO, " Too few losses were observed after it to tell whether training stopped."
    drop = (curve.start - curve.end) / abs(curve.start)
    if drop >= config.loss_flat_share:
        return Severity.INFO, f" The loss still fell {100 * drop:.1f}% over those steps."
    whole = curve_of(objective.rows, config.loss_min_steps)
    if whole is not None and math.isfinite(whole.start) and abs(curve.end) <= config.loss_flat_share * abs(whole.start):
        return Severity.INFO, (f" The loss had already fallen to {num(curve.end)} from {num(whole.start)}: "
                               "little was left to learn.")
    return Severity.WARNING, (f" Over those {curve.steps} steps the loss stayed flat ({num(curve.start)} → "
                              f"{num(curve.end)}): training stopped there.")


@headline("LK202", "largest update/weight ratio")
def _headline(finding: Finding, stats: AuditStats):
    name = finding.evidence.get("parameter")
    param = next((p for p in stats.params if p.name == name), None)
    if param is None or param.update_ratio_max is None:
        return None
    return num(param.update_ratio_max)


@note("LK202")
def unbanded_optimizers(stats: AuditStats, config: AuditConfig) -> list[str]:
    """The optimizers whose step is not one gradient step scaled by lr: not judged against the band."""
    notes = []
    for optimizer in stats.optimizers:
        rule = rule_of(optimizer)
        if not rule.banded:
            notes.append(f"{optimizer_label(stats, optimizer.index)} takes {rule.update}: one step is not one "
                         "gradient step scaled by lr, so its updates are not judged against the update-ratio band "
                         "(LK202).")
    return notes
