"""LK102 dead-units: ReLU-family units that never fire on any observed sample.

    d/dx relu(x) = 1 if x > 0 else 0        # NOTE: PyTorch uses relu'(0) = 0

A unit whose pre-activation is <= 0 for every input gets a zero gradient for every input,
so its incoming weights never change again: it cannot recover on its own. A unit is dead
when it did not fire in the trailing window of observed steps; when it fired earlier, the
step after its last firing is when it died. Some inactive units are normal, hence the
per-layer share thresholds and a minimum sample count.
"""
from __future__ import annotations

import statistics

from leaky.checks import register
from leaky.checks._util import pct, severity_above
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats

_SPIKE = 10.0     # a gradient norm or update this many times its median is "a spike"


def _just_before(stats: AuditStats, death: int) -> str:
    """What happened on the step before most units died: Karpathy's 'knocked off by a large
    update' is a gradient spike, a large update, or a learning-rate step."""
    before = death - 1
    rows = {row.step: (row.grad_norm, row.lr) for row in stats.series}
    events = []
    norms = [n for s, (n, _) in rows.items() if n is not None and s < before]
    if before in rows and rows[before][0] is not None and norms:
        typical = statistics.median(norms)
        if typical > 0 and rows[before][0] > _SPIKE * typical:
            events.append(f"the gradient norm spiked to {rows[before][0]:.3g} ({rows[before][0] / typical:.0f}× "
                          "its median)")
    lrs = [rows[s][1] for s in (before - 1, before) if s in rows]
    if len(lrs) == 2 and None not in lrs and lrs[0] and lrs[1] > 2 * lrs[0]:
        events.append(f"the learning rate jumped from {lrs[0]:.3g} to {lrs[1]:.3g}")
    ratios = [r for p in stats.params for s, r in p.update_ratios if s == before]
    if ratios and max(ratios) > 0.1:
        events.append(f"an update changed a weight by {max(ratios):.2g} of its norm")
    if before < 0 or before not in rows:
        return ""
    if not events:
        return f" Nothing unusual was measured at step {before}."
    return f" Just before, at step {before}, " + " and ".join(events) + "."


@register("LK102", "dead-units", "ReLU-family units that never activate on any observed sample")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    for act in stats.activations:
        if act.dead_units is None or not act.units:
            continue
        window_samples = act.samples * act.window // max(stats.steps, 1)
        # NOTE: samples are counted over all steps; per step they are the same, so this is
        # the number of samples of one unit in the trailing window.
        if window_samples < config.dead_min_samples:
            continue
        share = act.dead_units / act.units
        severity = severity_above(share, config.dead_warning, config.dead_error)
        if severity is None and share >= config.dead_info:
            severity = Severity.INFO
        if severity is None:
            continue
        died = sorted(act.died_steps)
        when = ""
        step = None
        if died:
            step = died[0]
            when = (f" {len(died)} of them fired earlier and died between steps {died[0]} and {died[-1]}"
                    f" (median {statistics.median(died):g}).{_just_before(stats, int(statistics.median(died)))}")
        message = (f"{pct(share)} of {act.module or 'this layer'}'s {act.units} {act.op} units "
                   f"({act.dead_units}) output 0 for all ~{window_samples} samples of the last "
                   f"{act.window} observed steps; relu'(x) = 0 for x ≤ 0, so they get no gradient and cannot "
                   f"recover.{when}")
        fix = ("Lower the learning rate or add warmup (a large update pushes biases far negative), "
               "initialise with nn.init.kaiming_normal_(w, nonlinearity='relu'), normalise the inputs, "
               "or use LeakyReLU/GELU, whose gradient is nonzero for x < 0.")
        evidence = {"dead_units": act.dead_units, "units": act.units, "dead_share": share,
                    "window_steps": act.window, "window_samples": window_samples,
                    "died_during_observation": len(died), "first_death_step": step}
        findings.append(Finding("dead-units", "LK102", severity, message, fix, act.module, act.op,
                                act.source, step, evidence))
    return findings
