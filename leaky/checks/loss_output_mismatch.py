"""LK301 loss-output-mismatch: what reaches the loss is not what the loss expects.

    cross_entropy(z, y) = -log softmax(z)_y      expects logits z, applies softmax itself
    nll_loss(a, y)      = -a_y                    expects log-probabilities a = log_softmax(z)
    binary_cross_entropy_with_logits(z, y)        expects logits, applies sigmoid itself
    binary_cross_entropy(p, y)                    expects probabilities p in [0, 1]

Fed probabilities, cross_entropy applies softmax a second time: inputs confined to [0, 1]
can differ by at most 1, so the predicted distribution can never be confident
(max probability e/(e + C - 1)) and the gradient softmax(p) - y never reaches 0. Fed
probabilities, nll_loss's gradient is a constant -1/N on the target entry: it pushes p_y
up without limit instead of -log p_y. Each rule reads the autograd node that produced the
loss input (through views), its value range, and the target's dtype and shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from leaky import ops
from leaky.checks import register
from leaky.checks._util import num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats, LossStats

# NOTE: log_softmax does not normalise in this sense: softmax(log_softmax(z)) = softmax(z), so
# cross_entropy(log_softmax(z), y) equals cross_entropy(z, y), gradient included.


def _expects(loss: LossStats, kind: str) -> bool:
    return ops.loss_expects(loss.op) == kind


def _producer(loss: LossStats):
    return ops.node_rule(loss.input_node)


@dataclass(frozen=True)
class Rule:
    applies: Callable[[LossStats, AuditStats, AuditConfig], bool]
    severity: Severity
    message: Callable[[LossStats], str]
    fix: str
    at_loss: bool = False   # point at the loss call (the fix goes there), not at the producer


def _normalised(loss: LossStats) -> bool:
    """Its input came out of a softmax or a sigmoid (ops: `normalises`)."""
    rule = _producer(loss)
    return rule is not None and rule.normalises


def _clipped(loss: LossStats) -> bool:
    """Its input came out of a ReLU-like op: never negative (ops: `clips`)."""
    rule = _producer(loss)
    return rule is not None and rule.clips


def _softmax_made(loss: LossStats) -> bool:
    """Its input came out of a softmax or a log-softmax (a normalisation over one dim)."""
    rule = _producer(loss)
    return rule is not None and rule.detail == ops.SOFTMAX_DIM


def _norm_name(loss: LossStats) -> str:
    """The producing op in the user's terms: SoftmaxBackward0 -> softmax."""
    rule = _producer(loss)
    if rule is not None:
        return rule.name
    node = (loss.input_node or "?").rstrip("0123456789")
    return (node[:-len("Backward")] if node.endswith("Backward") else node).lower()


def _dim_over_batch(loss: LossStats, stats: AuditStats) -> bool:
    op = stats.op(loss.input_site) if loss.input_site is not None else None
    rule = ops.rule(op.op) if op is not None else None
    return (rule is not None and rule.detail == ops.SOFTMAX_DIM and len(loss.input_shape) >= 2
            and op.detail.get("dim") in (0, -len(loss.input_shape)))


def _one_class(loss: LossStats) -> bool:
    """cross_entropy over a class dim of size 1 (dim 1 of an (N, C, ...) input, dim 0 of a (C,)
    one): pytorch/examples' DDP tutorial trains a Linear(20, 1) with it, and every gradient is 0."""
    shape = loss.input_shape
    return ops.losses.softmax_over_classes(loss.op) and bool(shape) and shape[1 if len(shape) >= 2 else 0] == 1


def _bounds(loss: LossStats) -> tuple[float, float] | None:
    """The output range of the op that feeds a regression loss (sigmoid [0, 1], relu [0, inf))."""
    if not _expects(loss, ops.VALUES) or loss.target_low is None or not loss.input_node:
        return None
    rule = ops.node_rule(loss.input_node.rstrip("0123456789"))
    return None if rule is None else rule.output_range


def _unreachable(loss: LossStats, config: AuditConfig) -> bool:
    """A bounded output regressed onto targets of which a real share of their range lies
    outside its bounds (a sigmoid onto prices, a ReLU onto standardised targets)."""
    bounds = _bounds(loss)
    if bounds is None:
        return False
    low, high = bounds
    outside = max(0.0, low - loss.target_low) + max(0.0, loss.target_high - high)
    span = loss.target_high - loss.target_low
    return outside > 1e-6 and outside > config.unreachable_target_share * span


RULES = (
    Rule(lambda loss, _, __: _expects(loss, ops.LOGITS) and _normalised(loss), Severity.ERROR,
         lambda loss: (f"{loss.op} applies its own normalisation, but its input already went through "
                       f"{_norm_name(loss)}: normalised twice, the inputs are squeezed into a small range "
                       f"(here [{num(loss.low)}, {num(loss.high)}]), so the loss can never be confident and "
                       "its gradient never vanishes at the right answer."),
         "Pass the raw logits: remove the softmax/sigmoid before the loss (keep it for metrics under "
         "torch.no_grad()), or use F.nll_loss on torch.log_softmax(logits, dim=-1)."),
    Rule(lambda loss, _, __: _expects(loss, ops.LOG_PROBABILITIES) and (_normalised(loss)
                                                                    or (loss.high is not None and loss.high > 1e-6)),
         Severity.ERROR,
         lambda loss: (f"{loss.op} expects log-probabilities (≤ 0) but gets "
                       + (f"{_norm_name(loss)} outputs in [{num(loss.low)}, {num(loss.high)}]; on probabilities "
                          "its gradient is a constant −1/N, so it pushes p_y up without bound instead of "
                          "minimising −log p_y."
                          if _normalised(loss) else
                          f"values up to {num(loss.high)}: positive numbers are not log-probabilities, and "
                          "on raw scores the loss −a_y is unbounded below.")),
         "Use torch.log_softmax(logits, dim=-1) before nll_loss, or F.cross_entropy(logits, target)."),
    Rule(lambda loss, _, __: _expects(loss, ops.LOGITS) and _clipped(loss), Severity.WARNING,
         lambda loss: (f"the logits reaching {loss.op} come out of {_norm_name(loss)}: they "
                       f"can never be negative (range here [{num(loss.low)}, {num(loss.high)}]), and wherever "
                       "they are clipped the gradient is exactly 0."),
         "Remove the ReLU/clamp after the last layer: logits must be free to take any sign."),
    Rule(lambda loss, _, __: _expects(loss, ops.PROBABILITIES) and (
             (loss.failed is not None) or (loss.low is not None and (loss.low < 0 or loss.high > 1))),
         Severity.ERROR,
         lambda loss: (f"{loss.op} needs probabilities in [0, 1]; it was given "
                       f"{'values outside that range (' + loss.failed + ')' if loss.failed else f'[{num(loss.low)}, {num(loss.high)}]'}."),
         "Pass logits to F.binary_cross_entropy_with_logits (nn.BCEWithLogitsLoss) instead of applying "
         "sigmoid yourself: it is also numerically stable.", at_loss=True),
    Rule(lambda loss, _, __: _expects(loss, ops.VALUES) and loss.target_shape is not None and (
             loss.target_dtype in ("int64", "int32", "uint8", "int16", "int8")
             or (loss.target_integral and len(loss.input_shape) == len(loss.target_shape) + 1
                 and loss.input_shape[-1] > 1)),
         Severity.ERROR,
         lambda loss: (f"{loss.op} compares predictions of shape {list(loss.input_shape)} with targets of shape "
                       f"{list(loss.target_shape)} ({loss.target_dtype}) that look like class indices: "
                       "a regression loss treats class 3 as 'closer' to 2 than to 7."),
         "For classes use F.cross_entropy(logits, target) with integer targets; for regression make the "
         "target the same shape as the prediction.", at_loss=True),
    Rule(lambda loss, _, __: _expects(loss, ops.VALUES) and loss.target_shape not in (None, ())
         and loss.target_shape != loss.input_shape and loss.failed is None, Severity.WARNING,
         lambda loss: (f"{loss.op} broadcasts predictions {list(loss.input_shape)} against targets "
                       f"{list(loss.target_shape)}: every prediction is compared with every target, not "
                       "with its own."),
         "Make the shapes match, e.g. pred.squeeze(-1) or target.unsqueeze(-1).", at_loss=True),
    Rule(lambda loss, _, config: _unreachable(loss, config), Severity.ERROR,
         lambda loss: (f"{loss.op} regresses the output of {_norm_name(loss)}, which lies in "
                       f"[{_bounds(loss)[0]:g}, {_bounds(loss)[1]:g}], onto targets in "
                       f"[{num(loss.target_low)}, {num(loss.target_high)}]: it can never reach those outside, and "
                       f"pushed toward its bound {_norm_name(loss)} goes flat (its derivative → 0)."),
         "Drop the squashing on the output layer (a plain Linear for regression), or scale the targets into "
         "the output's range."),
    Rule(lambda loss, _, __: _softmax_made(loss) and loss.input_shape
         and loss.input_shape[-1] == 1, Severity.ERROR,
         lambda loss: (f"the {loss.op} input is a softmax over a dimension of size 1: it is constant "
                       "(1, or 0 after log), so every gradient through it is exactly 0."),
         "For one output use a sigmoid with F.binary_cross_entropy_with_logits; for C classes output C logits."),
    Rule(lambda loss, _, __: _one_class(loss), Severity.ERROR,
         lambda loss: (f"{loss.op} gets {list(loss.input_shape)} scores: a class dimension of size 1. The softmax "
                       "over one class is 1 whatever the score, so the loss is constant (0) and every gradient "
                       "through it is exactly 0: nothing trains."),
         "For one output use F.binary_cross_entropy_with_logits (a yes/no target) or F.mse_loss (a number); "
         "for C classes output C scores.", at_loss=True),
    Rule(lambda loss, stats, __: _dim_over_batch(loss, stats), Severity.ERROR,
         lambda loss: (f"the {_norm_name(loss)} feeding {loss.op} normalises over dim 0 of a "
                       f"{list(loss.input_shape)} tensor, the batch: each class's scores are normalised "
                       "across samples instead of each sample's scores across classes."),
         "Normalise over the class dimension: torch.log_softmax(logits, dim=-1)."),
)


@register("LK301", "loss-output-mismatch", "a softmax or sigmoid fed into a loss that applies it again, and other loss wiring errors")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    for loss in stats.losses_seen:
        for rule in RULES:
            if rule.applies(loss, stats, config):
                findings.append(_finding(loss, rule, stats))
                break   # the first matching rule is the most specific
    return findings


def _finding(loss: LossStats, rule: Rule, stats: AuditStats) -> Finding:
    producer = stats.op(loss.input_site) if loss.input_site is not None and not rule.at_loss else None
    module = producer.module if producer is not None else loss.module
    source = producer.source if producer is not None and producer.source else loss.source
    op = producer.op if producer is not None else loss.op
    evidence = {"loss": loss.op, "loss_expects": loss.expects, "input_node": loss.input_node,
                "input_range": [loss.low, loss.high], "input_shape": list(loss.input_shape),
                "target_shape": None if loss.target_shape is None else list(loss.target_shape),
                "target_dtype": loss.target_dtype,
                "loss_source": None if loss.source is None else {"file": loss.source.file, "line": loss.source.line}}
    return Finding("loss-output-mismatch", "LK301", rule.severity, rule.message(loss), rule.fix, module, op,
                   source, None, evidence)
