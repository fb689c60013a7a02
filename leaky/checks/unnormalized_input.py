"""LK303 unnormalized-input: raw input features whose scale or offset drive the layer they
enter (any linear/conv layer fed data that needs no gradient) into the flat or dead
region of its nonlinearity.

A first layer z = W x + b with fan-in-scaled weights gives pre-activations of the scale of
x: features with mean 30 or std 50 put z far outside the range where sigmoid/tanh have
slope (|z| < ~3) or make ReLUs that see a large negative offset silent. Standardising each
feature, x' = (x - mean) / std, restores the range the initialisation assumed. leaky
reports this only when the layer the data enters is measurably saturated or dead.

Saturation is the inputs' doing only if they would cause it under the init they break: with
i.i.d. weights at the fan-based std s, z has scale sqrt(n)·s·rms(x), rms(x)² the mean over
features of mean² + std², and a Gaussian of that scale leaves P(|z| > e) flat (e the flat
edge, ~6 for sigmoid). Below LK101's warning share the saturation is the weights' (LK302);
the severity is that of the share the inputs alone account for.
"""
from __future__ import annotations

import math

from leaky.checks import register
from leaky.checks._layers import expected_std, flat_share_at, following_activation
from leaky.checks._util import line_of, num, pct
from leaky.config import AuditConfig
from leaky.finding import Cause, Finding, Severity
from leaky.stats import AuditStats, InputStats

_SHOWN = 8   # the fix spells out the measured mean and std when there are at most this many features


@register("LK303", "unnormalized-input", "the input scale drives the first layer into saturation or dead zones")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    for data in stats.inputs:
        act = following_activation(stats, data.site)
        if act is None or not data.mean:
            continue
        harm = _harm(act, config, _alone(stats, data, act, config))
        if harm is None:
            continue
        worst = max(max(abs(m), s) for m, s in zip(data.mean, data.std))
        if worst <= config.input_off_scale:
            continue
        findings.append(_finding(data, act, harm, worst))
    return findings


def _alone(stats: AuditStats, data: InputStats, act, config: AuditConfig) -> tuple[float, float, float] | None:
    """(the fan-based weight std, the pre-activation scale, the flat share) these inputs would
    give the activation through a layer initialised for it; None where that is not known."""
    weight = next((w for w in stats.weights if w.site == data.site), None)
    if weight is None:
        return None
    expected, _ = expected_std(act.family, weight.fan_in, weight.fan_out)
    rms = math.sqrt(sum(m * m + s * s for m, s in zip(data.mean, data.std)) / len(data.mean))
    scale = math.sqrt(weight.fan_in) * expected * rms
    share = flat_share_at(act.family, scale, config)
    return None if share is None else (expected, scale, share)


def _harm(act, config: AuditConfig, alone) -> tuple[str, float, Severity, tuple | None] | None:
    """(what the share counts, the share, severity, the inputs' part) when the activation is
    measurably hurt, and for saturation when the inputs alone would put it there."""
    if act.flat_share is not None and act.flat_share >= config.saturated_warning:
        if alone is not None and alone[2] < config.saturated_warning:
            return None   # a fan-based init would keep these inputs out of the flat region: the weights' doing
        share = act.flat_share if alone is None else min(act.flat_share, alone[2])
        severity = Severity.ERROR if share >= config.saturated_error else Severity.WARNING
        return "unit-samples in the flat region of", act.flat_share, severity, alone
    if act.dead_units is not None and act.units and act.dead_units / act.units >= config.dead_warning:
        share = act.dead_units / act.units
        return "units dead in", share, Severity.ERROR if share >= config.dead_error else Severity.WARNING, None
    return None


def _finding(data: InputStats, act, harm, worst: float) -> Finding:
    what, share, severity, alone = harm
    order = sorted(range(len(data.mean)), key=lambda i: -max(abs(data.mean[i]), data.std[i]))
    shown = ", ".join(f"#{i}: mean {num(data.mean[i])}, std {num(data.std[i])}" for i in order[:4])
    message = (f"the raw input to {data.module} has features far from standardised ({shown}); its "
               f"pre-activations scale with them, leaving {pct(share)} of {act.module or act.op}'s "
               f"{what} {act.op}.")
    if alone is not None:
        message += (f" Through weights at the fan-based std {num(alone[0])} these inputs alone give "
                    f"pre-activations of scale {num(alone[1])}, {pct(alone[2])} of them flat.")
    if len(data.mean) <= _SHOWN:
        mean = ", ".join(num(m) for m in data.mean)
        std = ", ".join(num(s) for s in data.std)
        fix = (f"Standardise the inputs with the statistics leaky measured: "
               f"x = (x - torch.tensor([{mean}])) / torch.tensor([{std}]) "
               "(better: compute mean and std on the training set once).")
    else:
        fix = ("Standardise each input feature: compute mean and std over the training set "
               "(mean = X.mean(0), std = X.std(0)) and feed (x - mean) / std.")
    evidence = {"mean": list(data.mean), "std": list(data.std), "samples": data.samples,
                "worst_feature_scale": worst, "activation": act.op, "affected_share": share,
                "flat_share_alone": None if alone is None else alone[2],
                # the finding this one explains, so that it is read first (checks.sort_findings)
                "explains": [{"code": "LK101" if what.startswith("unit-samples") else "LK102", "module": act.module}]}
    cause = Cause.at(data.made_source, f"the inputs built here (features up to {num(worst)} in mean or std)")
    if data.made_source is not None:
        fix += f" Do it where they are built ({line_of(data.made_source)})."
    return Finding("unnormalized-input", "LK303", severity, message, fix, data.module, data.op, data.source,
                   None, evidence, cause)
