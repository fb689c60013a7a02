"""LK102's fixes (checks/dead_units.py): LeakyReLU(0.01) in place of the ReLU (its module or
its call); the learning rate × 0.1 when units died during training; the layer that feeds
them re-initialised when they were dead from the start."""
from __future__ import annotations

import torch.nn.functional as F

from leaky import ops
from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.remedies import (Candidate, Context, feeding_layer, lines_of, reinit, remedy, scaled_learning_rate,
                                short_place)


@remedy("LK102")
def dead_units(finding: Finding, context: Context) -> list[Candidate]:
    candidates = []
    swap = _leaky_relu(finding, context)
    if swap is not None:
        candidates.append(swap)
    died = finding.evidence.get("died_during_observation", 0) or 0
    if died:
        candidates.extend(scaled_learning_rate(0.1, finding, context, "units were killed by updates"))
    if (finding.evidence.get("dead_units", 0) or 0) > died:
        layer = feeding_layer(context.stats, finding)
        activation = ops.activation(finding.op)
        if layer is not None and activation is not None:
            candidates.append(reinit(layer, activation.family, finding, context))
    return candidates


def _leaky_relu(finding: Finding, context: Context) -> Candidate | None:
    what = "LeakyReLU(0.01) in place of ReLU"
    (relu,) = ops.with_replacement(ops.LEAKY)
    kind = context.module_types.get(finding.module or "")
    module = ops.module_rule(kind)
    if finding.module and module is not None and module.extra.get("relu_like"):
        path = finding.module
        site = context.construction.get(path)

        def change():
            for where in lines_of(finding, site):
                made = edits.rewrite_call(where[0], where[1], {relu.module},
                                          lambda source, node: "nn.LeakyReLU(0.01)" if not node.args and not
                                          node.keywords else None)
                if made is not None:
                    return made
            return edits.snippet(f"replace nn.{relu.module}() by nn.LeakyReLU(0.01) for {path}")
        return Candidate(("leaky-relu",), what, [finding],
                         [lambda: rt.ModuleEdit([path], rt.swap_forward(lambda x: F.leaky_relu(x, 0.01)), what)],
                         [path], [change])
    if finding.source is None or finding.op != relu.name:
        return None
    file, line = finding.source.file, finding.source.line
    return Candidate(("leaky-relu",), what, [finding],
                     [lambda: rt.OpAtLine(file, line, set(relu.spellings), lambda f, a, k: F.leaky_relu(a[0], 0.01),
                                          what)],
                     [short_place(finding.source)],
                     [lambda: edits.rewrite_call(file, line, {relu.name}, lambda source, node:
                                                 f"torch.nn.functional.leaky_relu({edits.operand(source, node)}, 0.01)")])
