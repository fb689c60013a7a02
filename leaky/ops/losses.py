"""Loss functions, and what their first argument must be (LK301, the forward probes).

    cross_entropy(z, y) = -log softmax(z)_y      expects logits z, applies softmax itself
    nll_loss(a, y)      = -a_y                    expects log-probabilities a = log_softmax(z)
    binary_cross_entropy_with_logits(z, y)        expects logits, applies sigmoid itself
    binary_cross_entropy(p, y)                    expects probabilities p in [0, 1]
    mse_loss, l1_loss, smooth_l1_loss, huber_loss expect values on the target's scale
"""
from __future__ import annotations

from leaky.ops.rule import OpRule, register

LOGITS, LOG_PROBABILITIES, PROBABILITIES, VALUES = "logits", "log-probabilities", "probabilities", "values"

# LK307: the loss of a neutral output layer, the one a fresh model should start near.
#   classes   cross_entropy / nll_loss over C classes: uniform probabilities, log C whatever
#             the labels (a smoothed target still sums to 1; class weights are normalised)
#   prior     binary cross-entropy: predicting the label prior p̄ everywhere, H(p̄)
#   variance  mse_loss: predicting the target mean, Var(t)
#   deviation l1_loss: predicting the target mean, E|t - mean(t)|
CLASSES, PRIOR, VARIANCE, DEVIATION = "classes", "prior", "variance", "deviation"
_NEUTRAL = {"cross_entropy": CLASSES, "nll_loss": CLASSES, "binary_cross_entropy_with_logits": PRIOR,
            "binary_cross_entropy": PRIOR, "mse_loss": VARIANCE, "l1_loss": DEVIATION}

for _name, _expects in (("cross_entropy", LOGITS), ("binary_cross_entropy_with_logits", LOGITS),
                        ("multilabel_soft_margin_loss", LOGITS), ("nll_loss", LOG_PROBABILITIES),
                        ("kl_div", LOG_PROBABILITIES), ("binary_cross_entropy", PROBABILITIES),
                        ("mse_loss", VALUES), ("l1_loss", VALUES), ("smooth_l1_loss", VALUES),
                        ("huber_loss", VALUES)):
    register(OpRule(_name, loss=_expects, extra={"neutral": _NEUTRAL.get(_name)}))


# LK308: a loss's floor on one fixed batch, the least any output can score: the reference of
# "a small fraction of the first loss". 0 for a hard target (one class, one exact value);
# the target's own entropy for a soft one: cross-entropy against q is H(q) + KL(q‖p) ≥ H(q),
# with q the label-smoothed one-hot ((1 - ε) on the label + ε/C everywhere) or the given
# probabilities; binary cross-entropy against t in (0, 1) is H(t) + KL ≥ H(t). None where
# it is not known (class weights with a soft target, an unreduced loss).
def _entropy(q):
    import torch

    return -torch.special.xlogy(q, q)


def _reduced(per_element, reduction: str) -> float | None:
    if reduction == "mean":
        return float(per_element.mean())
    if reduction == "sum":
        return float(per_element.sum())
    return None


def _cross_entropy_floor(arguments: dict) -> float | None:
    import torch

    logits, target = arguments.get("input"), arguments.get("target")
    smoothing = float(arguments.get("label_smoothing", 0.0) or 0.0)
    reduction = arguments.get("reduction", "mean")
    if logits is None or target is None or logits.dim() < 2:
        return None
    classes = logits.shape[1]
    if not target.is_floating_point():
        if smoothing == 0.0:
            return 0.0
        if arguments.get("weight") is not None:
            return None
        on, off = 1 - smoothing + smoothing / classes, smoothing / classes
        per_sample = float(_entropy(torch.tensor(on)) + (classes - 1) * _entropy(torch.tensor(off)))
        kept = (target != arguments.get("ignore_index", -100)).sum()
        return per_sample if reduction == "mean" else per_sample * float(kept) if reduction == "sum" else None
    if arguments.get("weight") is not None:
        return None
    q = (1 - smoothing) * target.float() + smoothing / classes
    return _reduced(_entropy(q).sum(dim=1), reduction)


def _binary_floor(arguments: dict) -> float | None:
    target = arguments.get("target")
    if target is None:
        return None
    t = target.float()
    if bool(((t == 0) | (t == 1)).all()):
        return 0.0
    if arguments.get("weight") is not None or arguments.get("pos_weight") is not None:
        return None
    return _reduced(_entropy(t) + _entropy(1 - t), arguments.get("reduction", "mean"))


def _zero(arguments: dict) -> float:
    return 0.0


FLOORS = {"cross_entropy": _cross_entropy_floor, "nll_loss": _zero, "kl_div": _zero,
          "binary_cross_entropy": _binary_floor, "binary_cross_entropy_with_logits": _binary_floor,
          "mse_loss": _zero, "l1_loss": _zero, "smooth_l1_loss": _zero, "huber_loss": _zero}


def floor_of(name: str, arguments: dict) -> float | None:
    """The least value the loss `name` can take with these (bound) arguments; None: unknown."""
    function = FLOORS.get(name)
    if function is None:
        return None
    try:
        return function(arguments)
    except (RuntimeError, TypeError, ValueError):
        return None
