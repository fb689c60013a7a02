"""LK106's fixes (checks/dead_zone.py): a straight-through estimator at the line, or in the
module, whose derivative is 0 on a large share of elements: the value is kept and the gradient
passes as if the op were the identity (for a clamp: Huber's gradient, clipped to the bounds)."""
from __future__ import annotations

import ast

import torch.nn.functional as F

from leaky import ops
from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.remedies import Candidate, Context, remedy, short_place


def straight_through_ops(op: str) -> tuple[frozenset[str], bool] | None:
    """(the spellings replaced at the line, whether it is a clamp) for an op `leaky fix` can
    pass the gradient straight through (ops: replacement ops.STRAIGHT_THROUGH); not in place."""
    rule = ops.rule(op)
    if rule is None or rule.replacement != ops.STRAIGHT_THROUGH or op.endswith("_"):
        return None
    clamping = rule.zero is not None and rule.zero.kind in (ops.dead_zones.CLAMP.kind, ops.activations.BOUNDED.kind)
    if not clamping:
        return frozenset({op}), False
    clamps = frozenset(s for r in ops.with_replacement(ops.STRAIGHT_THROUGH) if r.zero is not None
                       and r.zero.kind in (ops.dead_zones.CLAMP.kind, ops.activations.BOUNDED.kind)
                       for s in r.spellings if not s.endswith("_"))
    return clamps, True


@remedy("LK106")
def dead_zone(finding: Finding, context: Context) -> list[Candidate]:
    module = ops.module_rule(context.module_types.get(finding.module or ""))
    if module is not None and module.replacement == ops.STRAIGHT_THROUGH and module.zero is ops.activations.BOUNDED:
        path = finding.module
        what = f"straight-through {module.module} module (Huber's gradient)"

        def through(module):
            return lambda x: x + (F.hardtanh(x, module.min_val, module.max_val) - x).detach()
        return [Candidate(("ste", path), what, [finding], [lambda: rt.ModuleEdit([path], rt.swap_forward_of(through),
                                                                                  what)], [path],
                          [lambda: edits.snippet(f"# in place of the nn.{module.module} at {path}, in forward():\n"
                                                 "x = x + (F.hardtanh(x, lo, hi) - x).detach()")])]
    straight = straight_through_ops(finding.op) if finding.source is not None else None
    if straight is None:
        return []
    file, line = finding.source.file, finding.source.line
    names, clamp = straight
    what = "straight-through clamp (Huber's gradient)" if clamp else f"straight-through {finding.op}"
    note = ("the clamped value is kept and the gradient passes it unchanged; for a squared error that is "
            "exactly the gradient of F.smooth_l1_loss, clipped to the clamp's bounds instead of cut to 0"
            if clamp else "the value is kept; the gradient passes as if the op were the identity")

    def rewrite(source, node):
        x = edits.operand(source, node)
        call = ast.get_source_segment(source, node)
        if not x or not call:
            return None
        if x.isidentifier():
            return f"({x} + ({call} - {x}).detach())"
        # NOTE: an expression is computed once, into a name, not repeated (it may run a model).
        name = "unclamped" if clamp else f"un{finding.op}ed"
        raw = x[1:-1] if x.startswith("(") and x.endswith(")") else x
        return f"{name} = {raw}", f"({name} + ({call.replace(raw, name, 1)} - {name}).detach())"

    return [Candidate(("ste", file, line), what, [finding],
                      [lambda: rt.OpAtLine(file, line, set(names), rt.straight_through, ops.STRAIGHT_THROUGH)],
                      [short_place(finding.source)], [lambda: edits.rewrite_call(file, line, set(names), rewrite)],
                      note=note)]
