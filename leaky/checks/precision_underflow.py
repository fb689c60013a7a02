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

Updates that round away. A weight kept in low precision holds few significant bits: 8 for
bfloat16 (eps = 2^-7), 11 for float16 (eps = 2^-10). The optimizer computes an update δ in
that precision's arithmetic and writes w + δ back rounded to the nearest representable
number, so any |δ| below about |w|·eps/2 is lost: the weight stays exactly where it was.
AdamW moves an element by about lr per step, so at lr 1e-4 every bfloat16 weight above
1e-4 / 2^-8 = 0.026 keeps its value. leaky compares, on each sampled step, the weights
before and after the step: of the elements of float16/bfloat16 parameters whose gradient was
nonzero, the share left unchanged. Float32 master weights with bfloat16 compute (autocast)
hold every update and are not judged.
"""
from __future__ import annotations

import math
from dataclasses import replace

from leaky.checks import headline, register
from leaky.checks._optim import optimizer_of
from leaky.checks._util import line_of, num, pct, severity_above
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.optimizers import rule_of
from leaky.stats import AuditStats


# significant bits of each low-precision dtype (the implicit one included): eps = 2^-(bits - 1)
_BITS = {"bfloat16": 8, "float16": 11}


@register("LK304", "precision-underflow", "fp16/bf16 gradients flushed to zero, or no effective loss scaling")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    underflow, rounded = _underflow(stats, config), _rounded_updates(stats, config)
    if underflow is not None and rounded is not None:
        # NOTE: one precision, one story: the weights that were cast are also those whose
        # updates round away (float16 weights with small gradients lose both)
        severity = max(underflow.severity, rounded.severity, key=lambda s: s.rank)
        return [replace(underflow, severity=severity, message=f"{underflow.message} And the updates: {rounded.message}",
                        evidence={**underflow.evidence, "rounded_updates": rounded.evidence})]
    return [f for f in (underflow, rounded) if f is not None]


def _underflow(stats: AuditStats, config: AuditConfig) -> Finding | None:
    candidates = [op for op in stats.ops if op.underflow_share is not None and op.steps]
    if not candidates:
        return None
    worst = max(candidates, key=lambda op: op.underflow_share + op.subnormal_share)
    lost = worst.underflow_share + worst.subnormal_share
    # NOTE: values flushed to 0 are lost; subnormal ones keep a few bits, and the weight
    # gradient that sums many of them can stay close to its float32 value. So only zeros
    # make an error; a majority of subnormals is a warning.
    severity = severity_above(worst.underflow_share, config.underflow_warning, config.underflow_error)
    if severity is None and lost >= config.underflow_error:
        severity = Severity.WARNING
    if severity is None:
        return None
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
    return Finding("precision-underflow", "LK304", severity, message, fix, worst.module, worst.op,
                   cast.source if cast is not None else worst.source, None, evidence)


def _rounded_updates(stats: AuditStats, config: AuditConfig) -> Finding | None:
    """Low-precision weights that the optimizer's step left unchanged although their gradient
    was nonzero: the update was below half a unit in the last place and rounded away."""
    low = [p for p in stats.params if p.rounded_share is not None and p.in_optimizer and p.dtype in _BITS]
    sizes = [math.prod(p.shape) for p in low]
    if not low or not sum(sizes):
        return None
    share = sum(p.rounded_share * n for p, n in zip(low, sizes)) / sum(sizes)
    severity = severity_above(share, config.rounded_update_warning, config.rounded_update_error)
    if severity is None:
        return None
    worst = max(zip(low, sizes), key=lambda pn: pn[0].rounded_share * pn[1])[0]
    dtype = worst.dtype
    half_ulp = 2.0 ** -_BITS[dtype]
    optimizer = optimizer_of(stats, worst)
    rate = _rate(optimizer, worst)
    # NOTE: only where lr alone sets the step size (Adam's m̂/√v̂ ~ ±1): SGD's step is lr × g
    per_element = optimizer is not None and rate and rule_of(optimizer).per_element_lr
    moved = (f" {optimizer.kind} at lr {num(rate)} moves an element by about {num(rate)} a step at most: every "
             f"weight above {num(rate)} / {num(half_ulp)} = {num(rate / half_ulp)} keeps its value."
             if per_element else "")
    message = (f"{pct(share)} of the elements of the {dtype} parameters ({len(low)} tensors, "
               f"{sum(sizes)} elements) that had a nonzero gradient were left exactly unchanged by the optimizer's "
               f"step (worst: {worst.name}, {pct(worst.rounded_share)}): a {dtype} weight keeps "
               f"{_BITS[dtype]} significant bits, so an update below about |w|·{num(half_ulp)} rounds away and the "
               f"step the optimizer computed is lost.{moved}")
    fix = ("Keep float32 master weights: leave the parameters in float32 and run the forward under "
           f"torch.autocast(device_type, dtype=torch.{dtype}), so the optimizer adds each update to a float32 "
           "weight; or keep a float32 copy that the optimizer updates, or an optimizer with stochastic rounding "
           "or Kahan-compensated updates for low-precision weights.")
    cast = _precision_origin(stats, kinds=("module",))
    evidence = {"unchanged_share": share, "parameters": len(low), "elements": sum(sizes), "dtype": dtype,
                "worst_parameter": worst.name, "worst_share": worst.rounded_share, "lr": rate}
    if cast is not None:
        message += f" The parameters were cast to {cast.dtype} at {line_of(cast.source)}."
    where = cast.source if cast is not None else (optimizer.source if optimizer is not None else worst.source)
    return Finding("precision-underflow", "LK304", severity, message, fix, worst.module, None, where, None, evidence)


def _rate(optimizer, param) -> float | None:
    if optimizer is None or param.group is None or param.group >= len(optimizer.initial_lrs):
        return None
    return optimizer.initial_lrs[param.group]


def _precision_origin(stats: AuditStats, kinds: tuple[str, ...] = ("autocast", "module")):
    """The line that put the computation in low precision: a float16 autocast region first
    (the gradients are float16 inside it), then a float16 cast of parameters, then the
    same for bfloat16 (only casts of `kinds`)."""
    rank = {("autocast", "float16"): 0, ("module", "float16"): 1, ("autocast", "bfloat16"): 2,
            ("module", "bfloat16"): 3}
    known = [c for c in stats.casts if c.source is not None and (c.kind, c.dtype) in rank and c.kind in kinds]
    return min(known, key=lambda c: rank[(c.kind, c.dtype)]) if known else None


@headline("LK304", "gradient elements flushed to 0")
def _headline(finding: Finding, stats: AuditStats):
    """The share the finding reports: float16 gradient elements flushed to 0 at its op, and/or
    of the low-precision weights' elements with a gradient, those a step left unchanged."""
    parts = []
    if "zero_share" in finding.evidence:
        shares = [op.underflow_share for op in stats.ops if op.underflow_share is not None and op.steps]
        parts.append(("gradient elements flushed to 0", pct(max(shares)) if shares else "none in float16"))
    if "unchanged_share" in finding.evidence or finding.evidence.get("rounded_updates"):
        low = [(p.rounded_share, math.prod(p.shape)) for p in stats.params
               if p.rounded_share is not None and p.in_optimizer and p.dtype in ("float16", "bfloat16")]
        size = sum(n for _, n in low)
        parts.append(("weight updates rounded away", pct(sum(s * n for s, n in low) / size) if size
                      else "no float16/bfloat16 weights"))
    if not parts:
        return None
    return " / ".join(label for label, _ in parts), " / ".join(value for _, value in parts)
