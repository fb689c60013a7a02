"""LK304 precision-underflow: float16 gradients flushed to zero or left with a few bits.

float16 has 10 mantissa bits and a smallest normal number of 2**-14 = 6.1e-5; below it
values are subnormal (fewer bits) down to 2**-24 = 6e-8, and below that they are 0.
Gradients of a mean-reduced loss are often 1e-6..1e-9 per element, so without loss
scaling most of them lose their precision or vanish. A GradScaler multiplies the loss by
S (e.g. 65536) before backward and divides the gradients by S before the step, moving
them into the normal range. bfloat16 keeps float32's exponent range: a bfloat16 gradient
underflows only where the float32 one would, so it is not counted. leaky measures, at ops
whose float32 gradient would be dense (not a ReLU, clamp or mask, and not fed by one: those
zeros are on purpose), the share of float16 gradient elements that are exactly 0 or
subnormal. The finding points at the line that chose the precision: the float16 autocast
region, or the cast of the model's parameters (`model.half()`, `.to(torch.float16)`).
"""
from __future__ import annotations

from leaky.checks import register
from leaky.checks._util import line_of, num, pct, severity_above
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats


@register("LK304", "precision-underflow", "fp16/bf16 gradients flushed to zero, or no effective loss scaling")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    candidates = [op for op in stats.ops if op.underflow_share is not None and op.steps]
    if not candidates:
        return []
    worst = max(candidates, key=lambda op: op.underflow_share + op.subnormal_share)
    lost = worst.underflow_share + worst.subnormal_share
    # NOTE: values flushed to 0 are lost; subnormal ones keep a few bits, and the weight
    # gradient that sums many of them can stay close to its float32 value. So only zeros
    # make an error; a majority of subnormals is a warning.
    severity = severity_above(worst.underflow_share, config.underflow_warning, config.underflow_error)
    if severity is None and lost >= config.underflow_error:
        severity = Severity.WARNING
    if severity is None:
        return []
    scaler = stats.loss_scaler
    scaling = (f"a GradScaler is active with scale {num(scaler['scale'])}, yet it is not enough"
               if scaler else "no GradScaler is active")
    message = (f"gradients arriving at {worst.op} ({worst.module or 'the loss code'}) are in low precision: "
               f"{pct(worst.underflow_share)} are exactly 0 and {pct(worst.subnormal_share)} are subnormal "
               f"(< 6.1e-5, a few bits left), where float32 would hold them all; {scaling}.")
    if scaler:
        fix = ("Raise the GradScaler's init_scale or let it grow (growth_interval), or switch to "
               "torch.autocast(dtype=torch.bfloat16), whose range matches float32.")
    else:
        fix = ("Keep the parameters in float32 and train under torch.autocast(device_type, dtype=torch.float16) "
               "with scaler = torch.amp.GradScaler(): scaler.scale(loss).backward(); scaler.step(opt); "
               "scaler.update(). Or use bfloat16, or compute the loss in float32.")
    cast = _precision_origin(stats)
    if cast is not None:
        what = "the autocast region" if cast.kind == "autocast" else f"{cast.target}'s parameters were cast"
        message += f" {cast.dtype} was chosen at {line_of(cast.source)} ({what})."
    evidence = {"zero_share": worst.underflow_share, "subnormal_share": worst.subnormal_share,
                "loss_scaler": scaler, "ops_checked": len(candidates),
                "op_source": None if worst.source is None else str(worst.source)}
    return [Finding("precision-underflow", "LK304", severity, message, fix, worst.module, worst.op,
                    cast.source if cast is not None else worst.source, None, evidence)]


def _precision_origin(stats: AuditStats):
    """The line that put the computation in low precision: a float16 autocast region first
    (the gradients are float16 inside it), then a float16 cast of parameters, then the
    same for bfloat16."""
    rank = {("autocast", "float16"): 0, ("module", "float16"): 1, ("autocast", "bfloat16"): 2,
            ("module", "bfloat16"): 3}
    known = [c for c in stats.casts if c.source is not None and (c.kind, c.dtype) in rank]
    return min(known, key=lambda c: rank[(c.kind, c.dtype)]) if known else None
