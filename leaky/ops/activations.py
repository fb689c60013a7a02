"""Nonlinearities: their local derivative, where it is flat, whether a unit can die, and
the initialisation a layer feeding them wants.

    d/dx relu(x) = 1 if x > 0 else 0           # NOTE: PyTorch uses relu'(0) = 0
    d/dz sigmoid(z) = s(1 - s) <= 1/4, reached at z = 0
    d/dz tanh(z) = 1 - tanh(z)^2 <= 1, reached at z = 0
    d/dx hardtanh(x, lo, hi) = 1 strictly inside (lo, hi), 0 outside
"""
from __future__ import annotations

import math

from leaky.ops.rule import BOUNDS, IDENTITY, LEAKY, SOFTMAX_DIM, STRAIGHT_THROUGH, Activation, Init, OpRule, Zone, register


def _sigmoid_share(s):
    # d/dz sigmoid = s(1-s) <= 1/4, reached at z = 0.
    return s * (1 - s) * 4


def _tanh_share(t):
    # d/dz tanh = 1 - tanh^2 <= 1, reached at z = 0.
    return 1 - t * t


def _sigmoid_flat_beyond(c: float) -> float:
    # 4 s(1-s) = c at s = (1 + sqrt(1-c)) / 2, that is z = logit(s)
    s = (1 + math.sqrt(1 - c)) / 2
    return math.log(s / (1 - s))


def _tanh_flat_beyond(c: float) -> float:
    # 1 - tanh(z)^2 = c at z = atanh(sqrt(1-c))
    return math.atanh(math.sqrt(1 - c))


def hardtanh_bounds(args: tuple, kwargs: dict) -> tuple[float, float]:
    """(min_val, max_val) of a hardtanh call, as the user wrote it."""
    low = kwargs.get("min_val", args[1] if len(args) > 1 else -1.0)
    high = kwargs.get("max_val", args[2] if len(args) > 2 else 1.0)
    return float(low), float(high)


KAIMING_RELU = Init("kaiming", "relu", kaiming_gain=True)   # sqrt(2 / fan_in): ReLU halves the variance
XAVIER_SIGMOID = Init("xavier", "sigmoid")
XAVIER_TANH = Init("xavier", "tanh")
XAVIER = Init("xavier", "linear")                            # a bounded or normalising output
LECUN = Init("lecun", "linear")                              # what follows is linear: sqrt(1 / fan_in)

RELU = Activation("relu", can_die=True, nonnegative=True, init=KAIMING_RELU)
THRESHOLD = Activation("relu", can_die=True, init=KAIMING_RELU)      # threshold(x, t, value): value may be < 0
SIGMOID = Activation("sigmoid", _sigmoid_share, max_derivative=0.25,
                     formula="sigmoid local gradient s(1−s) is at most 0.25", init=XAVIER_SIGMOID,
                     flat_beyond=_sigmoid_flat_beyond)
TANH = Activation("tanh", _tanh_share, max_derivative=1.0, formula="tanh local gradient 1−tanh² is at most 1",
                  init=XAVIER_TANH, flat_beyond=_tanh_flat_beyond)
HARDTANH = Activation("hardtanh", init=XAVIER, bounded=True)
SOFTMAX = Activation("softmax", init=XAVIER, rows=True)
SOFTMAX_NODE = "SoftmaxBackward"


def gumbel_soft_sample(out, args: tuple, kwargs: dict):
    """The rows gumbel_softmax's gradient goes through: its output, or with hard=True (a one-hot
    forward, y_hard − y_soft.detach() + y_soft) the soft sample its softmax node saved."""
    hard = kwargs.get("hard", args[2] if len(args) > 2 else False)
    if not hard:
        return out
    node = out.grad_fn
    for fn, _ in node.next_functions if node is not None else ():
        if fn is not None and type(fn).__name__.startswith(SOFTMAX_NODE):
            return getattr(fn, "_saved_result", None)
    return None


# NOTE: gumbel_softmax(logits, tau) is softmax((logits + g) / tau) with Gumbel noise g: a softmax
# whose rows are judged the same way (one-hot rows at tau = 0.05 pass no gradient).
GUMBEL_SOFTMAX = Activation("softmax", init=XAVIER, rows=True, judged=gumbel_soft_sample)

BOUNDED = Zone(
    "bounded", "d/dx hardtanh(x, lo, hi) = 1 strictly inside (lo, hi) and 0 outside",
    "Scale or normalise what feeds it (LayerNorm/BatchNorm), or use a smooth activation such as "
    "tanh or GELU.")
SOFTMAX_OF_ONE = Zone(
    "softmax1", "softmax over a dimension of size 1 is constant 1, so its Jacobian diag(s) − ssᵀ is 0",
    "For one logit use torch.sigmoid with nn.BCEWithLogitsLoss; otherwise take the softmax over "
    "the class dimension (dim=-1 of a [batch, classes] tensor).")

register(OpRule("relu", ("relu_",), ("ReluBackward",), "d/dx relu(x) = 1 if x > 0 else 0", activation=RELU,
                counts_zeros=True, keeps_finite=True, clips=True, replacement=LEAKY, module="ReLU",
                output_range=(0.0, math.inf),
                extra={"relu_like": True, "rnn_step": True}))
register(OpRule("threshold", ("threshold_",), ("ThresholdBackward",), "d/dx threshold(x, t, v) = 1 if x > t else 0",
                activation=THRESHOLD, counts_zeros=True, clips=True))
register(OpRule("sigmoid", ("sigmoid_",), ("SigmoidBackward",), "sigmoid local gradient s(1−s) is at most 0.25",
                activation=SIGMOID, counts_zeros=True, keeps_finite=True, output_range=(0.0, 1.0), normalises=True,
                replacement=IDENTITY, module="Sigmoid", elementwise=True))
register(OpRule("tanh", ("tanh_",), ("TanhBackward",), "tanh local gradient 1−tanh² is at most 1",
                activation=TANH, counts_zeros=True, keeps_finite=True, output_range=(-1.0, 1.0),
                module="Tanh", elementwise=True, extra={"rnn_step": True}))
register(OpRule("hardtanh", ("hardtanh_",), ("HardtanhBackward",), BOUNDED.derivative, zero=BOUNDED,
                activation=HARDTANH, counts_zeros=True, keeps_finite=True, output_range=(-1.0, 1.0),
                bounds=hardtanh_bounds, replacement=STRAIGHT_THROUGH, detail=BOUNDS, module="Hardtanh"))
register(OpRule("relu6", (), (), BOUNDED.derivative, zero=BOUNDED, activation=HARDTANH, keeps_finite=True,
                bounds=lambda args, kwargs: (0.0, 6.0), detail=BOUNDS, module="ReLU6",
                extra={"relu_like": True}))
register(OpRule("softmax", ("_softmax",), (SOFTMAX_NODE,), "its Jacobian is diag(s) − ssᵀ", zero=SOFTMAX_OF_ONE,
                activation=SOFTMAX, counts_zeros=True, keeps_finite=True, output_range=(0.0, 1.0), normalises=True,
                detail=SOFTMAX_DIM, replacement=IDENTITY, module="Softmax",
                extra={"before_log_probabilities": "log_softmax"}))
register(OpRule("log_softmax", ("_log_softmax",), ("LogSoftmaxBackward",), "its Jacobian is I − 1sᵀ",
                zero=SOFTMAX_OF_ONE, counts_zeros=True, keeps_finite=True, detail=SOFTMAX_DIM, replacement=IDENTITY,
                module="LogSoftmax"))
register(OpRule("gumbel_softmax", (), (), "softmax((logits + g) / tau): its Jacobian is diag(s) − ssᵀ over tau",
                activation=GUMBEL_SOFTMAX, keeps_finite=True, output_range=(0.0, 1.0), detail=SOFTMAX_DIM,
                # flat_arg: (name, position, value): the argument that makes its rows flat, and the value
                # at which they have room (`leaky fix` raises it to that at the call's line)
                extra={"dim_at": 4, "dim_default": -1, "flat_arg": ("tau", 1, 1.0), "flat_fix": (
                    "Its rows are one-hot because tau is small: (logits + g) / tau with Gumbel noise g is flat at "
                    "tau = 0.05 whatever the logits. Start tau at 1 (or more) and anneal it down during training "
                    "(tau = max(0.5, exp(-r·step)), Jang et al. 2017), or train with the soft sample and switch to "
                    "hard=True only at the end.")}))
register(OpRule("softsign", (), ("SoftsignBackward",), keeps_finite=True, elementwise=True))
# softplus(x) = log(1 + e^x) > 0: an output layer through it cannot reach a target below 0
# (LK301's unreachable targets, LK308's cause); its derivative sigmoid(x) → 0 as x → −∞.
register(OpRule("softplus", (), ("SoftplusBackward",), "d/dx softplus(x) = sigmoid(x), in (0, 1)",
                keeps_finite=True, output_range=(0.0, math.inf), module="Softplus", elementwise=True))
for _name, _nodes in (("leaky_relu", ("LeakyReluBackward",)), ("elu", ("EluBackward",)),
                      ("gelu", ("GeluBackward",)), ("silu", ("SiluBackward",)), ("mish", ("MishBackward",))):
    register(OpRule(_name, (f"{_name}_",), _nodes, counts_zeros=_name in ("leaky_relu", "elu"),
                    extra={"relu_like": True}))
register(OpRule("hardsigmoid", ("hardsigmoid_",), ("HardsigmoidBackward",), counts_zeros=True))
register(OpRule("hardswish", ("hardswish_",), ("HardswishBackward",), counts_zeros=True))
register(OpRule("dropout", ("dropout_", "feature_dropout", "alpha_dropout"), ("NativeDropoutBackward", "DropoutBackward"),
                counts_zeros=True))
