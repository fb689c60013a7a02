"""The op registry (leaky/ops): one rule per op, found by any spelling or node class, and a
new rule reaches every consumer with no other file touched."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky import ops

HARDSHRINK = ops.OpRule(
    "hardshrink", ("hardshrink_",), ("HardshrinkBackward",),
    "d/dx hardshrink(x, λ) = 1 if |x| > λ else 0",
    zero=ops.Zone("shrink", "d/dx hardshrink(x, λ) = 1 if |x| > λ else 0",
                  "Use softshrink, or a smaller λ, so that small inputs still pass a gradient."),
    counts_zeros=True)


def _train_through_hardshrink(steps: int = 12):
    torch.manual_seed(0)
    first, second = nn.Linear(16, 64), nn.Linear(64, 1)
    opt = torch.optim.Adam([*first.parameters(), *second.parameters()], lr=1e-3)
    x, y = torch.randn(128, 16), torch.randn(128, 1)
    with leaky.audit(steps=None) as audit:
        for _ in range(steps):
            loss = F.mse_loss(second(F.hardshrink(first(x), lambd=0.5)), y)   # |pre-activation| < 0.5: most of it
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit.report


def test_a_dead_zone_op_registered_at_test_time_is_found_by_lk106():
    assert ops.rule("hardshrink") is None
    assert not _train_through_hardshrink().by_code("LK106")   # unknown to leaky: nothing counted
    with ops.registered(HARDSHRINK):
        report = _train_through_hardshrink()
    (finding,) = report.by_code("LK106")
    assert finding.op == "hardshrink" and finding.module is None
    assert finding.evidence["zeroed_share"] > 0.5
    assert HARDSHRINK.zero.derivative in finding.message and finding.fix == HARDSHRINK.zero.fix
    assert ops.rule("hardshrink") is None and not ops.counts_zeros("HardshrinkBackward0")   # unregistered again


def test_every_spelling_and_node_class_finds_the_one_rule():
    clamp = ops.rule("clamp")
    assert all(ops.rule(s) is clamp for s in ("clamp_", "clip", "clip_"))
    assert ops.node_rule("ClampBackward1") is clamp
    assert ops.node_rule("ClampMinBackward0") is ops.rule("clamp_min")   # the longest prefix wins
    assert ops.module_rule("Softmax") is ops.rule("softmax")
    assert ops.rule("no_such_op") is None and ops.node_rule("NoSuchBackward0") is None


def test_a_spelling_cannot_belong_to_two_rules():
    import pytest

    with pytest.raises(ValueError, match="already has a rule"):
        ops.register(ops.OpRule("my_clamp", ("clip",)))
    assert ops.rule("my_clamp") is None


def test_in_place_spellings_are_never_taken_as_value_keeping():
    assert ops.keeps_finite("relu") and not ops.keeps_finite("relu_")
    assert ops.keeps_finite("clip") and not ops.keeps_finite("clip_")


def test_the_cached_traits_answer_as_the_questions_do_and_follow_the_registry():
    spellings = {s for rule in ops.REGISTRY.rules() for s in rule.spellings} | {"relu_", "no_such_op"}
    for op in spellings:
        t = ops.traits(op)
        assert t == (ops.rule(op), ops.keeps_finite(op), ops.selects(op), ops.is_matmul(op), ops.activation(op),
                     ops.loss_expects(op), ops.layer_kind(op)), op
    for kind in (torch.autograd.graph.Node, type("ReluBackward0", (), {}), type("TBackward0", (), {}),
                 type("AccumulateGrad", (), {}), type("ClampBackward1", (), {})):
        t = ops.node_traits(kind)
        name = kind.__name__
        assert (t.accumulates, t.passes_gradient, t.counts_zeros, t.zeros_on_purpose) == (
            name == ops.ACCUMULATE, ops.passes_gradient(name), ops.counts_zeros(name), ops.zeros_on_purpose(name))
    shrink_node = type("HardshrinkBackward0", (), {})
    assert ops.traits("hardshrink").rule is None and not ops.node_traits(shrink_node).counts_zeros   # cached...
    with ops.registered(HARDSHRINK):   # ... and forgotten when the registry changes
        assert ops.traits("hardshrink").rule is HARDSHRINK and ops.node_traits(shrink_node).counts_zeros
    assert ops.traits("hardshrink").rule is None and not ops.node_traits(shrink_node).counts_zeros


def test_only_moving_nodes_send_exactly_what_arrives():
    class Node:   # a max-pool node's saved arguments
        def __init__(self, kernel, stride, dilation=(1, 1)):
            self._saved_kernel_size, self._saved_stride, self._saved_dilation = kernel, stride, dilation

    pool = type("MaxPool2DWithIndicesBackward0", (Node,), {})
    assert ops.moves_values(pool((2, 2), (2, 2)))         # windows side by side
    assert not ops.moves_values(pool((3, 3), (1, 1)))     # overlapping windows add up
    assert ops.passes_gradient("TBackward0") and not ops.passes_gradient("TanhBackward0")


def test_a_check_s_page_lists_the_ops_it_knows_from_their_rules():
    from leaky.explain import page_text

    assert ops.rule("clamp").zero.derivative in page_text("LK106")
    assert "hardshrink" not in page_text("LK106")
    with ops.registered(HARDSHRINK):
        assert f"`hardshrink`: {HARDSHRINK.zero.derivative}" in page_text("dead-zone")
    assert ops.rule("sigmoid").activation.formula in page_text("LK101")


def test_lk106_s_page_states_the_rules_derivatives_and_the_config_s_thresholds():
    """The page's math is the op rules' text, the rules agree with autograd at the bounds,
    and its thresholds are the config in force, not numbers copied into the page."""
    from leaky.checks import CHECKS
    from leaky.config import AuditConfig
    from leaky.explain import page_text

    math = page_text("LK106").split("## The math")[1].split("## How leaky measures it")[0]
    for name in ("clamp", "hardtanh", "round", "where"):
        assert ops.rule(name).zero.derivative in math
    x = torch.tensor([-1.0, 0.0, 1.0, 2.0], requires_grad=True)
    (clamp,) = torch.autograd.grad(x.clamp(-1, 1).sum(), x)
    (hardtanh,) = torch.autograd.grad(F.hardtanh(x).sum(), x)
    assert clamp.tolist() == [1, 1, 1, 0] and "inside [lo, hi]" in ops.rule("clamp").zero.derivative
    assert hardtanh.tolist() == [0, 1, 0, 0] and "strictly inside (lo, hi)" in ops.rule("hardtanh").zero.derivative
    config = AuditConfig(dead_zone_loss_warning=0.07, dead_zone_mass_error=0.6)
    page = page_text("LK106", config)
    assert "≥ 7%" in page and "≥ 60%" in page and "≥ 5%" not in page
    assert all("{{" not in page_text(code) for code in CHECKS)
