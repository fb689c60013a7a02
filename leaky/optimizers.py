"""What leaky knows about each optimizer's update rule: one rule per optimizer class.

The update-ratio band of LK202 (||Δw||/||w|| per step near ~1e-3) and the advice "lower the
learning rate" both assume that one step() is one update computed from one gradient and
scaled by lr:

    SGD:            Δw = -lr * (g + momentum buffer)        ||Δw|| ~ lr * ||g|| / (1 - momentum)
    Adam family:    Δw = -lr * m̂ / (sqrt(v̂) + eps)        |Δw_i| <~ lr per element
                    (RMSprop too): so ||Δw|| / ||w|| <~ lr / rms(w), set by lr alone
    RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, ASGD: lr times a gradient statistic

Two classes of torch.optim break that assumption, and leaky stays quiet about their band:

    LBFGS:  step(closure) runs up to max_iter quasi-Newton iterations, each from a fresh
            gradient, with a line search when asked: one step is a small solve, and a large
            update is what it is for.
    Rprop:  the per-element step size adapts by the gradient's sign within step_sizes; lr
            is only its starting value, so lowering lr does not shrink later steps.

An optimizer whose step(closure) evaluated its closure more than once (a line search) is
treated like LBFGS whatever its class. Unknown optimizers (third-party, custom) are taken
to be first-order methods whose step lr scales, the common case.
"""
from __future__ import annotations

from dataclasses import dataclass

from leaky.stats import OptimizerStats


@dataclass(frozen=True)
class OptimizerRule:
    kind: str
    update: str                       # the update rule in words, for messages
    one_gradient_step: bool = True    # one step() is one update from one gradient
    lr_scales_step: bool = True       # the update is lr times a gradient statistic
    # |Δw_i| is about lr per element whatever the gradient's scale (Adam's m̂/√v̂ is ~±1 when
    # the gradient keeps its sign; RMSprop's g/√E[g²] too): lr alone sets the step size.
    per_element_lr: bool = False
    # its first update is lr × sign(g) per element whatever the gradient (bias-corrected
    # m̂ / √v̂ = g / |g| at t = 1; RMSprop's g / √((1 - α) g²) is 10× that at α = 0.99), so the
    # first step's ||Δw||/||w|| is lr / rms(w) by construction: the rate against the init's
    # scale, not a blow-up. RAdam's first steps are unrectified, lr × m̂: not this.
    sign_first_step: bool = False

    @property
    def banded(self) -> bool:
        """Whether LK202's band and its learning-rate advice apply."""
        return self.one_gradient_step and self.lr_scales_step


RULES: dict[str, OptimizerRule] = {}


def register(rule: OptimizerRule) -> OptimizerRule:
    RULES[rule.kind] = rule
    return rule


_FIRST_ORDER = "Δw = -lr × a statistic of the gradient"
_PER_ELEMENT = ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "SparseAdam")
_SIGN_FIRST = ("Adam", "AdamW", "Adamax", "NAdam", "RMSprop", "SparseAdam", "Adagrad")
for _kind, _update in (("SGD", "Δw = -lr × (g + momentum × buffer)"), ("Adam", "Δw = -lr × m̂ / (√v̂ + eps)"),
                       ("AdamW", "Δw = -lr × (m̂ / (√v̂ + eps) + weight_decay × w)"),
                       ("Adamax", "Δw = -lr × m̂ / max|g|"), ("NAdam", "Δw = -lr × (Nesterov m̂) / (√v̂ + eps)"),
                       ("RAdam", "Δw = -lr × r_t × m̂ / (√v̂ + eps)"), ("RMSprop", "Δw = -lr × g / √(E[g²] + eps)"),
                       ("Adagrad", "Δw = -lr × g / √(Σg² + eps)"), ("Adadelta", _FIRST_ORDER), ("ASGD", _FIRST_ORDER),
                       ("SparseAdam", "Δw = -lr × m̂ / (√v̂ + eps), on the rows a step touched")):
    register(OptimizerRule(_kind, _update, per_element_lr=_kind in _PER_ELEMENT, sign_first_step=_kind in _SIGN_FIRST))
register(OptimizerRule("LBFGS", "up to max_iter quasi-Newton iterations per step(closure)",
                       one_gradient_step=False))
register(OptimizerRule("Rprop", "a per-element step size that grows or shrinks by the gradient's sign, within "
                                "step_sizes; lr is only where it starts", lr_scales_step=False))


def rule_of(optimizer: OptimizerStats) -> OptimizerRule:
    """The rule of an optimizer that stepped; a line search seen makes any optimizer LBFGS-like."""
    rule = RULES.get(optimizer.kind) or OptimizerRule(optimizer.kind, _FIRST_ORDER)
    if optimizer.closure_calls > 1 and rule.one_gradient_step:
        return OptimizerRule(rule.kind, f"up to {optimizer.closure_calls} closure evaluations per step(closure)",
                             one_gradient_step=False, lr_scales_step=rule.lr_scales_step)
    return rule
