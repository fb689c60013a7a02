"""LK101's fixes, one for each way a unit goes flat (checks/saturated_activation.py).

- **A sigmoid or tanh layer in its flat tails**: re-initialise the layer that feeds it with
  the init its nonlinearity wants (`ops.init_for`), which brings its pre-activations back
  near 0 where s(1 − s) is largest.
- **A softmax whose own argument makes its rows one-hot** (gumbel_softmax at a tiny tau:
  (logits + g) / tau is one-hot whatever the logits): that argument raised to where the rows
  have room (its op rule's `flat_arg`: tau = 1, Jang et al.'s start), at the call's line.
  Both runs are scored with the raised argument on their held-out steps (it changes the
  forward, so the loss is computed the fixed way), and the script should anneal it down
  from there.
- **An output softmax that collapsed during training** (a policy onto one action): the
  updates of the layer that computes its scores × 0.1, that layer's learning rate × 0.1
  (`runtime.scaled_update`). A re-initialisation would start the same collapse again.
- **A softmax flat from the first step on scores computed without scaling** (attention
  without 1/sqrt(d)): no mechanical fix; how the scores should be scaled depends on what they
  are, and the finding names their line.
"""
from __future__ import annotations

import ast
import copy

from leaky import ops
from leaky.checks._optim import optimizer_of
from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.remedies import Candidate, Context, feeding_layer, reinit, remedy, short_place

SCORES_LR = 0.1    # the lr factor tried on the layer that computes a collapsed softmax's scores


@remedy("LK101")
def saturated(finding: Finding, context: Context) -> list[Candidate]:
    evidence = finding.evidence
    if evidence.get("developed"):
        return _collapsed(finding, context)
    if "first_step_flat_row_share" in evidence:
        return _flat_from_start(finding, context)
    layer = feeding_layer(context.stats, finding)
    activation = ops.activation(finding.op) if finding.op and not finding.op.endswith("_") else None
    family = activation.family if activation is not None and activation.max_derivative is not None else None
    if layer is None:
        return context.no_fix(finding, "no layer with weights feeds this activation")
    return [reinit(layer, family, finding, context)]


def _collapsed(finding: Finding, context: Context) -> list[Candidate]:
    layer = finding.evidence.get("scores_module")
    if not layer:
        return context.no_fix(finding, "the layer that computes the softmax's scores is not known")
    found: list = []

    def collect(module, path):
        found.extend(p for p in module.parameters() if p.requires_grad)

    what = f"learning rate × {SCORES_LR:g} for the layer that computes the scores"
    note = (f"each step's update of {layer}'s parameters is scaled by {SCORES_LR:g} after the optimizer computes it: for "
            "a step linear in lr (SGD, Adam, AdamW, RMSprop) that is exactly their learning rate × "
            f"{SCORES_LR:g}, the other layers' unchanged")
    root = context.root or "model"
    attribute = "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in layer.split("."))
    param = next((p for p in context.stats.params if p.module == layer), None)
    optimizer = optimizer_of(context.stats, param) if param is not None else None
    kind = optimizer.kind if optimizer is not None else "Adam"
    snippet = (f"# give {layer} a param group of its own, at a tenth of the rate:\n"
               f"scores = list({root}{attribute}.parameters())\n"
               f"rest = [p for p in {root}.parameters() if all(p is not q for q in scores)]\n"
               f"optimizer = torch.optim.{kind}([{{'params': rest}}, {{'params': scores, 'lr': lr * {SCORES_LR:g}}}], "
               "lr=lr)")
    return [Candidate(("scores-lr", layer), what, [finding],
                      [lambda: rt.ModuleEdit([layer], collect, "found"),
                       lambda: rt.scaled_update(lambda: found, SCORES_LR, what)], [layer],
                      [lambda: edits.snippet(snippet)], note=note)]


def _flat_from_start(finding: Finding, context: Context) -> list[Candidate]:
    rule = ops.rule(finding.op) if finding.op else None
    arg = rule.extra.get("flat_arg") if rule is not None else None
    if arg is None or finding.source is None:
        why = "its scores are computed unscaled"
        if finding.cause is not None:
            why += f" (at line {finding.cause.line})"
        return context.no_fix(finding, why + "; how to scale them (1/sqrt(d), a temperature, a normalisation) "
                                             "depends on what they are")
    name, index, value = arg
    file, line = finding.source.file, finding.source.line
    names = {s for s in rule.spellings if not s.endswith("_")} | {rule.name}
    what = f"{name} = {value:g} (at least) in {rule.name}"

    def raised(func, args, kwargs):
        if len(args) > index:
            args = (*args[:index], max(args[index], value), *args[index + 1:])
        else:
            kwargs = {**kwargs, name: max(kwargs.get(name, value), value)}
        return func(*args, **kwargs)

    def rewrite(source, node):
        new = copy.deepcopy(node)
        given = [k for k in new.keywords if k.arg == name]
        if given:
            given[0].value = ast.Constant(value)
        elif len(new.args) > index:
            new.args[index] = ast.Constant(value)
        else:
            new.keywords.append(ast.keyword(name, ast.Constant(value)))
        return ast.unparse(new)

    note = (f"the rows of {rule.name} have room at {name} = {value:g}; anneal it down from there during training "
            f"({name} = max(0.5, exp(-r·step)), Jang et al. 2017) rather than start at the small value")
    return [Candidate(("raise-arg", file, line), what, [finding],
                      [lambda: rt.OpAtLine(file, line, names, raised, what)], [short_place(finding.source)],
                      [lambda: edits.rewrite_call(file, line, names, rewrite)], changes_loss=True, note=note)]
