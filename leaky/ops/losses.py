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
