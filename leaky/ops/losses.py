"""Loss functions, and what their first argument must be (LK301, the forward taps).

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

_SOFTMAX_OVER_CLASSES = frozenset({"cross_entropy"})


def softmax_over_classes(name: str) -> bool:
    """A loss that takes the softmax over its input's class dim itself (cross_entropy): over
    one class that softmax is 1, and the loss constant (LK301). nll_loss does not normalise."""
    return name in _SOFTMAX_OVER_CLASSES


# NOTE: not a loss, but it normalises its input as cross_entropy does: log p = z − logsumexp(z).
# torch.distributions.Categorical(logits=z) (a policy's action distribution) does exactly that,
# so a softmax before it normalises twice, as before cross_entropy (LK301).
register(OpRule("logsumexp", loss=LOGITS))


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


# A weighted sum of one loss on one input z, Σ_k c_k·loss(z, t_k) with c_k >= 0 (mixup's
# lam·CE(z, y_a) + (1 - lam)·CE(z, y_b)): cross-entropy and binary cross-entropy are linear in
# their target, so the sum is C·loss(z, t̄) with C = Σ c_k and t̄ = Σ c_k t_k / C, whose floor is
# C·H(t̄): C·H(lam) per sample whose two labels differ. For squared error
# Σ c_k (z − t_k)² = C (z − t̄)² + Σ c_k (t_k − t̄)², whose floor is the second term.
_MIXED = {"cross_entropy": "distribution", "nll_loss": "distribution", "binary_cross_entropy": "binary",
          "binary_cross_entropy_with_logits": "binary", "mse_loss": "squared"}


def _distribution(name: str, arguments: dict):
    """The target of a cross-entropy as probabilities over dim 1 (N, C, ...): one-hot,
    label-smoothed, or as given. None where it is no distribution (class weights, ignored
    labels)."""
    import torch

    logits, target = arguments.get("input"), arguments.get("target")
    if logits is None or target is None or logits.dim() < 2 or arguments.get("weight") is not None:
        return None
    classes = logits.shape[1]
    smoothing = float(arguments.get("label_smoothing", 0.0) or 0.0)
    if target.is_floating_point():
        q = target.float()
    else:
        if bool((target == arguments.get("ignore_index", -100)).any()) or bool(((target < 0) | (target >= classes)).any()):
            return None
        q = torch.nn.functional.one_hot(target.long(), classes).movedim(-1, 1).float()
    return (1 - smoothing) * q + smoothing / classes


def mixed_floor(name: str, parts: list[tuple[float, dict]]) -> float | None:
    """The least Σ_k c_k·`name`(z, ...) can be over z, for the (c_k, bound arguments) of
    terms of one loss on one input z; None where it is not known."""
    import torch

    if not parts or any(c < 0 for c, _ in parts):
        return None
    if len(parts) == 1:
        floor = floor_of(name, parts[0][1])
        return None if floor is None else parts[0][0] * floor
    total = sum(c for c, _ in parts)
    reductions = {arguments.get("reduction", "mean") for _, arguments in parts}
    kind = _MIXED.get(name)
    if kind is None or len(reductions) != 1 or total <= 0:
        floors = [floor_of(name, arguments) for _, arguments in parts]
        same = all(_same_target(parts[0][1], arguments) for _, arguments in parts)
        return None if None in floors or not same else total * floors[0]
    reduction = reductions.pop()
    try:
        if kind == "distribution":
            qs = [_distribution(name, arguments) for _, arguments in parts]
            if any(q is None for q in qs) or len({tuple(q.shape) for q in qs}) != 1:
                return None
            mixed = sum(c * q for (c, _), q in zip(parts, qs)) / total
            return None if (per := _reduced(_entropy(mixed).sum(dim=1), reduction)) is None else total * per
        targets = [arguments.get("target") for _, arguments in parts]
        if any(t is None for t in targets) or len({tuple(t.shape) for t in targets}) != 1 or any(
                arguments.get("weight") is not None or arguments.get("pos_weight") is not None for _, arguments in parts):
            return None
        mean = sum(c * t.float() for (c, _), t in zip(parts, targets)) / total
        if kind == "binary":
            per = _reduced(_entropy(mean) + _entropy(1 - mean), reduction)
            return None if per is None else total * per
        spread = sum(c * (t.float() - mean) ** 2 for (c, _), t in zip(parts, targets))
        return _reduced(spread, reduction)
    except (RuntimeError, TypeError, ValueError):
        return None


def _same_target(a: dict, b: dict) -> bool:
    import torch

    ta, tb = a.get("target"), b.get("target")
    return ta is tb or (isinstance(ta, torch.Tensor) and isinstance(tb, torch.Tensor) and ta.shape == tb.shape
                        and torch.equal(ta, tb))


def floor_of(name: str, arguments: dict) -> float | None:
    """The least value the loss `name` can take with these (bound) arguments; None: unknown."""
    function = FLOORS.get(name)
    if function is None:
        return None
    try:
        return function(arguments)
    except (RuntimeError, TypeError, ValueError):
        return None
