"""LK303 unnormalized-input: raw input features whose scale or offset drive the layer they
enter (any linear/conv layer fed data that needs no gradient) into the flat or dead
region of its nonlinearity.

A first layer z = W x + b with fan-in-scaled weights gives pre-activations of the scale of
x: features with mean 30 or std 50 put z far outside the range where sigmoid/tanh have
slope (|z| < ~3) or make ReLUs that see a large negative offset silent. Standardising each
feature, x' = (x - mean) / std, restores the range the initialisation assumed. leaky
reports this only when the layer the data enters is measurably saturated or dead.
"""
from __future__ import annotations

from leaky.checks import register
from leaky.checks._layers import following_activation
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
        harm = _harm(act, config)
        if harm is None:
            continue
        worst = max(max(abs(m), s) for m, s in zip(data.mean, data.std))
        if worst <= config.input_off_scale:
            continue
        findings.append(_finding(data, act, harm, worst))
    return findings


def _harm(act, config: AuditConfig) -> tuple[str, float, Severity] | None:
    """(what the share counts, the share, severity) when the activation is measurably hurt."""
    if act.flat_share is not None and act.flat_share >= config.saturated_warning:
        severity = Severity.ERROR if act.flat_share >= config.saturated_error else Severity.WARNING
        return "unit-samples in the flat region of", act.flat_share, severity
    if act.dead_units is not None and act.units and act.dead_units / act.units >= config.dead_warning:
        share = act.dead_units / act.units
        return "units dead in", share, Severity.ERROR if share >= config.dead_error else Severity.WARNING
    return None


def _finding(data: InputStats, act, harm, worst: float) -> Finding:
    what, share, severity = harm
    order = sorted(range(len(data.mean)), key=lambda i: -max(abs(data.mean[i]), data.std[i]))
    shown = ", ".join(f"#{i}: mean {num(data.mean[i])}, std {num(data.std[i])}" for i in order[:4])
    message = (f"the raw input to {data.module} has features far from standardised ({shown}); its "
               f"pre-activations scale with them, leaving {pct(share)} of {act.module or act.op}'s "
               f"{what} {act.op}.")
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
                # the finding this one explains, so that it is read first (checks.sort_findings)
                "explains": [{"code": "LK101" if what.startswith("unit-samples") else "LK102", "module": act.module}]}
    cause = Cause.at(data.made_source, f"the inputs built here (features up to {num(worst)} in mean or std)")
    if data.made_source is not None:
        fix += f" Do it where they are built ({line_of(data.made_source)})."
    return Finding("unnormalized-input", "LK303", severity, message, fix, data.module, data.op, data.source,
                   None, evidence, cause)
