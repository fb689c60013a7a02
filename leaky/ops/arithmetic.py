"""Elementwise arithmetic: where a product or a max can zero a gradient, and where a
derivative is infinite while the value is finite (LK107's backward traps).

    d/dx (x * m) = m              zero wherever the other factor is (a mask)
    d/dx max(x, y) = 1 where x is the larger, else 0
    d/dx log(x) = 1/x             infinite at x = 0; where(x > 0, log(x), 0) still computes it
    d/dx sqrt(x) = 1/(2·sqrt(x))  infinite at x = 0
    0 · inf = NaN                 a masked branch does not protect the backward pass
    x * c, x / c, -x              only scale x when c is a single number (a temperature, a
                                  logit scale): LK307 follows logits back through them
"""
from __future__ import annotations

from leaky.ops.rule import LOG_INPUT, OpRule, register


def _single(node, saved: str):
    """The operand the node saved under `saved`, when it is one number (a 0-d tensor; a Python
    scalar is saved as one too), else None."""
    try:
        value = getattr(node, saved, None)
    except RuntimeError:   # freed after a backward
        return None
    return value if value is not None and hasattr(value, "numel") and value.numel() == 1 else None


def product_scales(node) -> tuple[int, object, int] | None:
    """x * c or c * x with c one number: x times c.

    NOTE: a Python scalar has no input slot (its next function is None)."""
    other, own = _single(node, "_saved_other"), _single(node, "_saved_self")
    if other is not None and own is None:
        return 0, other, 1
    if own is not None and other is None:
        return 1, own, 1
    return None


def negation_scales(node) -> tuple[int, object, int]:
    """−x: x times −1."""
    return 0, -1.0, 1


def quotient_scales(node) -> tuple[int, object, int] | None:
    """x / c with c one number: x times 1 / c."""
    other = _single(node, "_saved_other")
    return None if other is None else (0, other, -1)


# NOTE: sums and differences have no rule of their own but this: elementwise (record/bypass.py
# walks through them: 1 + tanh(u) in GELU-tanh; 1 − σ(x) is an RsubBackward). "AddBackward" is
# no prefix of AddmmBackward.
register(OpRule("add", (), ("AddBackward",), "d/dx (x + y) = 1", elementwise=True))
register(OpRule("sub", ("subtract",), ("SubBackward", "RsubBackward"), "d/dx (x − y) = 1, d/dy = −1", elementwise=True))

# GradScaler.scale(loss) is loss * scale: the node backward() then starts from
SCALED_LOSS_NODE = "MulBackward0"
# NOTE: "Mul" as torch's own node prefix: MulBackward0/1 (and the multi-margin losses' nodes).
register(OpRule("mul", (), ("Mul",), "d/dx (x * m) = m", counts_zeros=True, scales=product_scales,
                elementwise=True))
register(OpRule("neg", ("negative",), ("NegBackward",), "d/dx (−x) = −1", scales=negation_scales,
                elementwise=True))
register(OpRule("abs", (), ("AbsBackward",), "d/dx |x| = sign(x), 0 at x = 0", counts_zeros=True,
                elementwise=True))
# NOTE: torch.max(a, b) / torch.min(a, b) elementwise choose a branch per element: a clamp
# (a rule with `zero` and `bounds`) on one branch, set against the unclipped other (PPO's
# clipped surrogate and value loss), is a pessimistic bound, a trust region by design:
# d/dx max(f(x), f(clamp(x))) = 0 only where the clamped branch wins and the clamp binds.
# record/clipping.py finds it from `chooses`, LK106 reports it as info.
register(OpRule("maximum", (), ("MaximumBackward",), counts_zeros=True, chooses=True))
register(OpRule("minimum", (), ("MinimumBackward",), counts_zeros=True, chooses=True))
register(OpRule("log", (), ("LogBackward",), "d/dx log(x) = 1/x", detail=LOG_INPUT, elementwise=True, extra={"of_normaliser": (
    "log(softmax(x)) underflows: softmax rounds small probabilities to 0 and log(0) = −inf",
    "Use torch.log_softmax(x, dim) or pass the logits to F.cross_entropy, which computes "
    "log-softmax stably.")}, trap=(
    "d/dx log(x) = 1/x is infinite at x = 0 (and log is NaN for x < 0); masking the output "
    "with where() does not mask the backward, since 0 · inf = NaN",
    "Mask the input, not the output: torch.log(torch.where(x > 0, x, torch.ones_like(x))), or "
    "add an epsilon: torch.log(x.clamp_min(1e-12)).")))
register(OpRule("sqrt", (), ("SqrtBackward",), "d/dx sqrt(x) = 1/(2·sqrt(x))", elementwise=True, trap=(
    "d/dx sqrt(x) = 1/(2·sqrt(x)) is infinite at x = 0",
    "Add an epsilon inside: torch.sqrt(x + 1e-12), or use torch.linalg.vector_norm, whose "
    "gradient at 0 is defined.")))
register(OpRule("div", ("truediv", "divide"), ("DivBackward",), "d/dy (x/y) = −x/y²", scales=quotient_scales,
                elementwise=True, trap=(
    "d/dy (x/y) = −x/y² is infinite at y = 0", "Guard the denominator: x / (y + eps).")))
register(OpRule("pow", (), ("PowBackward",), "d/dx x^p = p·x^(p−1)", elementwise=True, trap=(
    "d/dx x^p = p·x^(p−1) is infinite at 0 for p < 1", "Add an epsilon to the base.")))
register(OpRule("exp", (), ("ExpBackward",), "d/dx exp(x) = exp(x)", elementwise=True, trap=(
    "exp overflows to inf for inputs above ~88 in float32",
    "Subtract the max first (log-sum-exp) or use the stable built-in (log_softmax, "
    "logsumexp, BCEWithLogitsLoss).")))
