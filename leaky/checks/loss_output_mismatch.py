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

from leaky.checks import register
from leaky.checks._util import num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats, LossStats

_LOGIT_LOSSES = {"cross_entropy", "binary_cross_entropy_with_logits", "multilabel_soft_margin_loss"}
_LOGPROB_LOSSES = {"nll_loss", "kl_div"}
_REGRESSION = {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"}
# NOTE: log_softmax is not among them: softmax(log_softmax(z)) = softmax(z), so
# cross_entropy(log_softmax(z), y) equals cross_entropy(z, y), gradient included.
_NORMALISERS = ("SoftmaxBackward", "SigmoidBackward")
_CLIPPERS = ("ReluBackward", "ThresholdBackward")   # outputs >= 0 by construction


@dataclass(frozen=True)
class Rule:
    applies: Callable[[LossStats, AuditStats], bool]
    severity: Severity
    message: Callable[[LossStats], str]
    fix: str
    at_loss: bool = False   # point at the loss call (the fix goes there), not at the producer


def _made_by(loss: LossStats, prefixes) -> bool:
    return bool(loss.input_node) and loss.input_node.startswith(prefixes)


def _norm_name(loss: LossStats) -> str:
    """The producing op in the user's terms: SoftmaxBackward0 -> softmax."""
    node = (loss.input_node or "?").rstrip("0123456789")
    node = node[:-len("Backward")] if node.endswith("Backward") else node
    return {"LogSoftmax": "log_softmax", "ClampMin": "clamp_min"}.get(node, node.lower())


def _dim_over_batch(loss: LossStats, stats: AuditStats) -> bool:
    op = stats.op(loss.input_site) if loss.input_site is not None else None
    return (op is not None and op.op in ("log_softmax", "softmax") and len(loss.input_shape) >= 2
            and op.detail.get("dim") in (0, -len(loss.input_shape)))


_BOUNDED = {"SigmoidBackward": (0.0, 1.0), "TanhBackward": (-1.0, 1.0), "SoftmaxBackward": (0.0, 1.0),
            "HardtanhBackward": (-1.0, 1.0)}


def _unreachable(loss: LossStats) -> tuple[float, float] | None:
    """A bounded output regressed onto targets outside its range: the bounds, else None."""
    if loss.op not in _REGRESSION or loss.target_low is None or not loss.input_node:
        return None
    bounds = _BOUNDED.get(loss.input_node.rstrip("0123456789"))
    if bounds is None:
        return None
    low, high = bounds
    return bounds if loss.target_low < low - 1e-6 or loss.target_high > high + 1e-6 else None


RULES = (
    Rule(lambda loss, _: loss.op in _LOGIT_LOSSES and _made_by(loss, _NORMALISERS), Severity.ERROR,
         lambda loss: (f"{loss.op} applies its own normalisation, but its input already went through "
                       f"{_norm_name(loss)}: normalised twice, the inputs are squeezed into a small range "
                       f"(here [{num(loss.low)}, {num(loss.high)}]), so the loss can never be confident and "
                       "its gradient never vanishes at the right answer."),
         "Pass the raw logits: remove the softmax/sigmoid before the loss (keep it for metrics under "
         "torch.no_grad()), or use F.nll_loss on torch.log_softmax(logits, dim=-1)."),
    Rule(lambda loss, _: loss.op in _LOGPROB_LOSSES and (_made_by(loss, ("SoftmaxBackward", "SigmoidBackward"))
                                                         or (loss.high is not None and loss.high > 1e-6)),
         Severity.ERROR,
         lambda loss: (f"{loss.op} expects log-probabilities (≤ 0) but gets "
                       + (f"{_norm_name(loss)} outputs in [{num(loss.low)}, {num(loss.high)}]; on probabilities "
                          "its gradient is a constant −1/N, so it pushes p_y up without bound instead of "
                          "minimising −log p_y."
                          if _made_by(loss, _NORMALISERS) else
                          f"values up to {num(loss.high)}: positive numbers are not log-probabilities, and "
                          "on raw scores the loss −a_y is unbounded below.")),
         "Use torch.log_softmax(logits, dim=-1) before nll_loss, or F.cross_entropy(logits, target)."),
    Rule(lambda loss, _: loss.op in _LOGIT_LOSSES and _made_by(loss, _CLIPPERS), Severity.WARNING,
         lambda loss: (f"the logits reaching {loss.op} come out of {_norm_name(loss)}: they "
                       f"can never be negative (range here [{num(loss.low)}, {num(loss.high)}]), and wherever "
                       "they are clipped the gradient is exactly 0."),
         "Remove the ReLU/clamp after the last layer: logits must be free to take any sign."),
    Rule(lambda loss, _: loss.op == "binary_cross_entropy" and (
             (loss.failed is not None) or (loss.low is not None and (loss.low < 0 or loss.high > 1))),
         Severity.ERROR,
         lambda loss: (f"binary_cross_entropy needs probabilities in [0, 1]; it was given "
                       f"{'values outside that range (' + loss.failed + ')' if loss.failed else f'[{num(loss.low)}, {num(loss.high)}]'}."),
         "Pass logits to F.binary_cross_entropy_with_logits (nn.BCEWithLogitsLoss) instead of applying "
         "sigmoid yourself: it is also numerically stable.", at_loss=True),
    Rule(lambda loss, _: loss.op in _REGRESSION and loss.target_shape is not None and (
             loss.target_dtype in ("int64", "int32", "uint8", "int16", "int8")
             or (loss.target_integral and len(loss.input_shape) == len(loss.target_shape) + 1
                 and loss.input_shape[-1] > 1)),
         Severity.ERROR,
         lambda loss: (f"{loss.op} compares predictions of shape {list(loss.input_shape)} with targets of shape "
                       f"{list(loss.target_shape)} ({loss.target_dtype}) that look like class indices: "
                       "a regression loss treats class 3 as 'closer' to 2 than to 7."),
         "For classes use F.cross_entropy(logits, target) with integer targets; for regression make the "
         "target the same shape as the prediction.", at_loss=True),
    Rule(lambda loss, _: loss.op in _REGRESSION and loss.target_shape not in (None, ())
         and loss.target_shape != loss.input_shape and loss.failed is None, Severity.WARNING,
         lambda loss: (f"{loss.op} broadcasts predictions {list(loss.input_shape)} against targets "
                       f"{list(loss.target_shape)}: every prediction is compared with every target, not "
                       "with its own."),
         "Make the shapes match, e.g. pred.squeeze(-1) or target.unsqueeze(-1).", at_loss=True),
    Rule(lambda loss, _: _unreachable(loss) is not None, Severity.ERROR,
         lambda loss: (f"{loss.op} regresses the output of {_norm_name(loss)}, which lies in "
                       f"[{_unreachable(loss)[0]:g}, {_unreachable(loss)[1]:g}], onto targets in "
                       f"[{num(loss.target_low)}, {num(loss.target_high)}]: it can never reach them, and the "
                       f"closer it gets to its bound the flatter {_norm_name(loss)} becomes (its derivative → 0)."),
         "Drop the squashing on the output layer (a plain Linear for regression), or scale the targets into "
         "the output's range."),
    Rule(lambda loss, _: _made_by(loss, ("SoftmaxBackward", "LogSoftmaxBackward")) and loss.input_shape
         and loss.input_shape[-1] == 1, Severity.ERROR,
         lambda loss: (f"the {loss.op} input is a softmax over a dimension of size 1: it is constant "
                       "(1, or 0 after log), so every gradient through it is exactly 0."),
         "For one output use a sigmoid with F.binary_cross_entropy_with_logits; for C classes output C logits."),
    Rule(lambda loss, stats: _dim_over_batch(loss, stats), Severity.ERROR,
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
            if rule.applies(loss, stats):
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
