"""LK101 saturated-activation: sigmoid/tanh units pinned where the derivative is ~0.

    d/dz sigmoid(z) = s(1-s) <= 1/4      d/dz tanh(z) = 1 - tanh(z)^2 <= 1

A unit-sample is flat when its local derivative is below `flat_derivative_share` of that
maximum (|z| >~ 6 for sigmoid, 3 for tanh). Every gradient through a flat unit-sample is
multiplied by that tiny number. Softmax saturation is reported as info only, and only when
the softmax's own backward gain shows the gradient is actually blocked: peaked attention
is normal.
"""
from __future__ import annotations

from leaky import ops
from leaky.checks import register
from leaky.checks._util import num, pct, severity_above
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import ActivationStats, AuditStats



def _smooth_family(name: str):
    """A sigmoid-like family: its local derivative has a maximum, and flat tails (ops)."""
    family = ops.family(name)
    return family if family is not None and family.max_derivative is not None else None


@register("LK101", "saturated-activation", "sigmoid/tanh/softmax units sit where the local derivative is ~0")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    for act in stats.activations:
        family = ops.family(act.family)
        if _smooth_family(act.family) is not None and act.flat_share is not None:
            severity = severity_above(act.flat_share, config.saturated_warning, config.saturated_error)
            if severity is not None:
                findings.append(_smooth(act, severity, stats, config))
        elif (family is not None and family.rows and act.peaked_share is not None
              and act.peaked_share >= config.softmax_peaked_share):
            op = stats.op(act.site)
            if op is not None and op.gain is not None and op.gain < config.softmax_blocked_gain:
                findings.append(_softmax(act, op.gain, config))
    return findings


def _smooth(act: ActivationStats, severity: Severity, stats: AuditStats, config: AuditConfig) -> Finding:
    family = _smooth_family(act.family)
    peak = family.max_derivative
    median = None if act.median_derivative_share is None else act.median_derivative_share * peak
    op = stats.op(act.site)
    gain = op.gain if op is not None else None
    where = act.module or "the model"
    passes = f", so {where} passes on {num(gain)} of the gradient it receives" if gain is not None else ""
    message = (f"{family.formula}; here the median is {num(median)}, and {pct(act.flat_share)} of "
               f"{act.units} units × {act.samples} samples sit where it is below "
               f"{num(config.flat_derivative_share * peak)}{passes}.")
    fix = ("Keep pre-activations near 0: initialise the layer that feeds this "
           f"{act.family} with nn.init.xavier_uniform_ (fan-in scaling), standardise the inputs, "
           "or add a LayerNorm/BatchNorm before it; for hidden layers, ReLU or GELU do not saturate.")
    evidence = {"flat_share": act.flat_share, "stuck_unit_share": act.stuck_share,
                "median_local_derivative": median, "max_local_derivative": peak, "units": act.units,
                "samples_per_unit": act.samples, "backward_gain": gain}
    return Finding("saturated-activation", "LK101", severity, message, fix, act.module, act.op,
                   act.source, None, evidence)


def _softmax(act: ActivationStats, gain: float, config: AuditConfig) -> Finding:
    message = (f"{pct(act.peaked_share)} of softmax rows put > {config.peaked_row_probability:g} on one entry; "
               "its Jacobian "
               f"diag(s) − ssᵀ is then ~0 and the backward gain here is {num(gain)}.")
    fix = "Scale the logits down (a temperature, or 1/sqrt(d) in attention) or normalise what feeds them."
    return Finding("saturated-activation", "LK101", Severity.INFO, message, fix, act.module, act.op,
                   act.source, None, {"peaked_share": act.peaked_share, "backward_gain": gain})
