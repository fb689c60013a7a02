"""LK307 loss-at-init: the first loss far above what a neutral output layer would score.

A fresh model that knows nothing should predict nothing in particular: uniform class
probabilities (cross-entropy log C, whatever the labels, label smoothing and class weights
included), the label prior for a binary cross-entropy (H(p̄)), the target mean for a
regression (MSE Var(t), L1 E|t - mean(t)|). A first loss far above that is the output
layer's initialisation speaking: over-confident logits (a large init scale) or outputs
offset from the targets (a bias at 0 for targets of mean 50, or for a 1%-positive label).
The first iterations are then spent undoing the initialisation, the "hockey stick" of
Karpathy's recipe, and the loss curve hides how fast the model learns. The line to change
is the output layer's initialisation.

The layer may reach the loss through single-number scales (ops whose rule `scales`):
`head(h) / temperature`, `logit_scale.exp() * head(h)`, `z @ prototypes.T / 0.1`. A
temperature of 0.1 multiplies logits of std 0.5 by 10: the first loss is then far above
log C unless the head starts near zero or its inputs are normalised (CLIP). The layer is
judged with its scale, which the message names, and the line that scales is the finding's.
"""
from __future__ import annotations

import math

from leaky import ops
from leaky.checks import register
from leaky.checks._util import line_of, num
from leaky.checks.bad_initialization import init_cause
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats, LossStats


@register("LK307", "loss-at-init", "the first loss is far above what a neutral output layer would score")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    # NOTE: against a moving target (a bootstrapped TD target) or a rival (a GAN), the first
    # loss says nothing about the output layer: both ends move. A target network is known by
    # its first sync, or from the first step as a copy of the trained model's weights (a
    # watch's first check pass, or a short audit, comes before any sync).
    if stats.target_syncs or stats.target_copied or stats.coupled_optimizers:
        return []
    findings = []
    for loss in stats.losses_seen:
        finding = _judge(loss, stats, config)
        if finding is not None:
            findings.append(finding)
    return findings


def _neutral(loss: LossStats) -> tuple[float, str, str] | None:
    """(the neutral loss, what it is, the unit), or None when it cannot be known."""
    start = loss.start
    kind = start.get("neutral")
    if kind == ops.losses.CLASSES and start.get("classes", 0) >= 2:
        classes = start["classes"]
        return math.log(classes), f"log C = log {classes}, uniform probabilities over {classes} classes", "nats"
    mean = start.get("target_mean")
    if mean is None or not math.isfinite(mean):
        return None
    if kind == ops.losses.PRIOR and start.get("target_hard") and 0 < mean < 1:
        prior = -(mean * math.log(mean) + (1 - mean) * math.log(1 - mean))
        return prior, f"H(p̄), predicting the label prior p̄ = {num(mean)} everywhere", "nats"
    if kind == ops.losses.VARIANCE:
        return start.get("target_var"), f"Var(t), predicting the target mean {num(mean)}", "(target units)²"
    if kind == ops.losses.DEVIATION:
        return start.get("target_mad"), f"E|t − mean(t)|, predicting the target mean {num(mean)}", "target units"
    return None


def _judge(loss: LossStats, stats: AuditStats, config: AuditConfig) -> Finding | None:
    first = loss.start.get("loss")
    neutral = _neutral(loss)
    if first is None or neutral is None or loss.input_site is None or not math.isfinite(first):
        return None
    baseline, what, unit = neutral
    # NOTE: a baseline of ~0 (constant targets, a discriminator's all-ones labels) makes every
    # ratio huge and none meaningful.
    if baseline is None or not math.isfinite(baseline) or baseline <= config.loss_init_min_baseline:
        return None
    ratio = first / baseline
    if ratio < config.loss_init_factor:
        return None
    excess = first - baseline
    start = loss.start
    site = start.get("scaled_site", loss.input_site)
    layer = stats.op(site)
    weight = next((w for w in stats.weights if w.site == site), None)
    # NOTE: only a loss fed straight by a layer or a matrix product (its logits or its
    # regression output), or by one through single-number scales, is judged: after another
    # op (a softmax over a size-1 dim, a clamp) the first loss says more about that op
    # (LK106, LK301) than about the output layer's initialisation.
    if layer is None or (weight is None and not ops.is_matmul(layer.op)):
        return None
    module = layer.module
    scaler = stats.op(loss.input_site) if "scaled_site" in start else None
    scale = start.get("scale")
    scaled = "" if scaler is None or scale is None else (
        f" {layer.op}'s output reaches it multiplied by {num(scale)} ({line_of(scaler.source)}).")
    message = (f"the first {loss.op} was {num(first)} per element, {num(ratio)}× what a neutral output layer scores "
               f"({num(baseline)}: {what}), {num(excess)} {unit} above it: the first steps are spent undoing the "
               f"output layer's initialisation (a 'hockey stick' in the loss curve) before the model learns "
               f"anything.{scaled}")
    biased = module is None or any(p.name == f"{module}.bias" for p in stats.params)
    fix = _fix(start, loss, baseline, biased)
    if scaled:
        fix = (f"{fix} The scale {num(scale)} multiplies whatever the layer starts with: start the layer at zero "
               "(nn.init.zeros_ on its weight and bias) or normalise what it multiplies (F.normalize on the features "
               "and on the prototypes or weights, as CLIP does), or scale by less (a larger temperature).")
    evidence = {"first_loss": first, "neutral_loss": baseline, "ratio": ratio, "excess": excess, "unit": unit,
                "neutral": start.get("neutral"), "classes": start.get("classes"),
                "target_mean": start.get("target_mean"), "output_module": module, "scale": scale}
    where = scaler.source if scaler is not None and scaler.source is not None else layer.source
    return Finding("loss-at-init", "LK307", Severity.WARNING, message, fix, module, layer.op, where, 0,
                   evidence, init_cause(stats, weight, f"its initial outputs give the first loss {num(first)}"))


def _fix(start: dict, loss: LossStats, baseline: float, biased: bool = True) -> str:
    """`biased`: whether the output layer has a bias (a head built with bias=False, as GPT-style
    models tie theirs, has none: no line may touch it)."""
    kind = start.get("neutral")
    if kind == ops.losses.CLASSES:
        zeroed = "; head.bias.zero_()" if biased else ""
        return ("Start the output layer near zero so that the logits are nearly uniform: scale its weights down "
                f"(with torch.no_grad(): head.weight.mul_(0.01){zeroed}), or nn.init.zeros_ on "
                f"{'them' if biased else 'its weight'}.")
    mean = start.get("target_mean")
    if kind == ops.losses.PRIOR:
        logit = math.log(mean / (1 - mean))
        return (f"Set the output layer's bias to the label prior's logit, log(p / (1 − p)) = {num(logit)} for "
                f"p = {num(mean)} (nn.init.constant_(head.bias, {num(logit)})), and scale its weights down.")
    return (f"Set the output layer's bias to the target mean {num(mean)} (nn.init.constant_(head.bias, {num(mean)})), "
            "or standardise the targets (and undo it for predictions), and scale its weights down.")
