"""LK301's fixes: a softmax or sigmoid before a loss that applies it again is removed, or
turned into its log form, at its line or in its module's forward. The loss itself is then
computed differently, so the unfixed runs are scored the fixed way (`changes_loss`)."""
from __future__ import annotations

import ast

import torch.nn.functional as F

from leaky import ops
from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.remedies import Candidate, Context, lines_of, remedy, short_place


@remedy("LK301")
def loss_output_mismatch(finding: Finding, context: Context) -> list[Candidate]:
    node = (finding.evidence.get("input_node") or "").rstrip("0123456789")
    rule = ops.node_rule(node)
    expects = finding.evidence.get("loss_expects")
    if rule is None or rule.replacement != ops.IDENTITY or expects not in (ops.LOGITS, ops.LOG_PROBABILITIES):
        return []
    kind = context.module_types.get(finding.module or "")
    module = ops.module_rule(kind)
    if module is not None and module.replacement == ops.IDENTITY:
        return _normaliser_module(finding, context, kind, module, expects)
    if finding.source is None:
        return []
    file, line = finding.source.file, finding.source.line
    names = set(rule.spellings)
    instead = rule.extra.get("before_log_probabilities")
    if expects == ops.LOGITS:
        what, replace = f"remove the {node[:-len('Backward')].lower()} before the loss", rt.identity
        rewrite = lambda source, node_: edits.operand(source, node_)   # noqa: E731
    elif instead is not None:
        what = f"{instead} in place of {rule.name} before the loss"
        replace = lambda f, a, k: F.log_softmax(*a, **k)   # noqa: E731
        rewrite = None
    else:
        return []

    def change():
        made = edits.rewrite_call(file, line, names, rewrite) if rewrite else edits.rewrite_call(
            file, line, names, lambda source, node_: ast.get_source_segment(source, node_).replace(
                rule.name, instead, 1))
        return made or edits.snippet(what)
    return [Candidate(("normaliser", file, line), what, [finding], [lambda: rt.OpAtLine(file, line, names, replace, what)],
                      [short_place(finding.source)], [change], changes_loss=True)]


def _normaliser_module(finding: Finding, context: Context, kind: str, rule, expects: str) -> list[Candidate]:
    """An nn.Softmax/nn.Sigmoid module before the loss: change that module's forward."""
    path = finding.module
    site = context.construction.get(path)
    if expects == ops.LOGITS:
        what, make, new = f"remove the {kind} module before the loss", (lambda module: lambda x: x), "nn.Identity()"
    elif rule.extra.get("before_log_probabilities"):
        what = f"Log{kind} in place of the {kind} module before the loss"
        make = lambda module: lambda x: F.log_softmax(x, dim=module.dim)   # noqa: E731
        new = None
    else:
        return []

    def change():
        # the line that builds the module: leaky's own finding line, else where it was assigned
        for where in lines_of(finding, site):
            made = edits.rewrite_call(where[0], where[1], {kind}, lambda source, node: new if new else
                                      ast.get_source_segment(source, node).replace(kind, "Log" + kind, 1))
            if made is not None:
                return made
        return edits.snippet(f"{what}: {path}")
    return [Candidate(("normaliser", path), what, [finding],
                      [lambda: rt.ModuleEdit([path], rt.swap_forward_of(make), what)], [path], [change],
                      changes_loss=True)]
