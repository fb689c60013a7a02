"""What every run of `leaky fix` is scored by: the program's own held-out loss, or, where a
flat op sits between the model and the loss, the quantity inside that op.

A clamp on the loss path (LK106 with the role "loss_path": a clamped TD error, a clamped
prediction) flattens the objective itself. Once |td| > 1, `clamp(td, -1, 1).pow(2)` is 1
whatever td is, so a run whose errors shrank from 30 to 5 scores the same as one whose
errors stayed at 30; and a straight-through fix keeps the clamped value by construction.
The clamped loss cannot show that a fix helped.

So for such a program every run (the unfixed one, its repeats, each fix) is scored on its
held-out steps with that op passed through as the identity: for `clamp(td, -1, 1).pow(2)
.mean()` the score is the mean square of td, the error itself. Neither the leak (a zeroed
gradient) nor a fix of it (a straight-through clamp, a Huber loss) changes that function.
The ops passed through are the ones whose `leaky fix` replacement is straight-through (the
op rules' `replacement`): their backward is then the identity's, so the identity is what the
op flattens. The held-out steps do not train (the parameters are frozen), so this changes
what is measured, never the run.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from leaky import ops
from leaky.finding import Finding
from leaky.fix import runtime as rt
from leaky.fix.remedies import Context
from leaky.fix.remedies.dead_zone import straight_through_ops
from leaky.rerun.trial import Changes

LOSS_ROLE = "loss_path"     # LK106's evidence["role"] for an op with no layer between it and the loss
DEAD_ZONE = "LK106"


@dataclass(frozen=True)
class Measure:
    """How a run's held-out steps are scored."""

    label: str                                      # for a table header: "loss", "loss without clamp"
    how: str                                        # what the score is, in one sentence
    flat: tuple[str, ...] = ()                      # the flat ops passed through (file:line or module path)
    parts: tuple[Callable[[], object], ...] = ()    # run-time primitives, for the held-out steps only

    @property
    def unflattened(self) -> bool:
        """The score is not the program's own loss: a flat op is passed through."""
        return bool(self.parts)

    def build(self) -> Changes:
        return Changes(*(make() for make in self.parts))

    def to_dict(self) -> dict:
        return {"label": self.label, "how": self.how, "flat_ops": list(self.flat),
                "own_loss": not self.unflattened}


OWN_LOSS = Measure("loss", "the program's own loss, mean over the held-out batches (model frozen at the last step)")


def choose(findings: list[Finding], context: Context) -> Measure:
    """The program's own loss, unless a dead zone on the loss path flattens it."""
    parts, places, names = [], [], []
    for finding in findings:
        if finding.code != DEAD_ZONE or finding.severity.value == "info" or \
                finding.evidence.get("role") != LOSS_ROLE or _into_probabilities(finding):
            continue
        made = _pass_through(finding, context)
        if made is not None and made[1] not in places:
            parts.append(made[0])
            places.append(made[1])
            names.append(finding.op)
    if not parts:
        return OWN_LOSS
    ops_named = " and ".join(dict.fromkeys(names))
    where = ", ".join(places)
    how = (f"the program's loss on the held-out batches (model frozen at the last step), computed with the "
           f"{ops_named} at {where} passed through as the identity: the quantity the {ops_named} flattens "
           f"(for a squared clamped error, the mean square of the unclamped error), which neither the zeroed "
           "gradient nor a fix that keeps the clamped value changes by construction")
    return Measure(f"loss without {ops_named}", how, tuple(places), tuple(parts))


def _into_probabilities(finding: Finding) -> bool:
    """A clamp into [0, 1] (or within it) before the loss: the loss takes probabilities
    (binary_cross_entropy raises outside [0, 1]), so the op cannot be passed through. Its own
    loss shows a fix there: a sample clamped on the wrong side scores -log(eps), and one
    brought back inside scores less."""
    low, high = finding.evidence.get("low"), finding.evidence.get("high")
    return isinstance(low, (int, float)) and isinstance(high, (int, float)) and 0 <= low and high <= 1


def _pass_through(finding: Finding, context: Context) -> tuple[Callable[[], object], str] | None:
    """(a maker of the primitive that makes the flat op the identity, where it is)."""
    module = ops.module_rule(context.module_types.get(finding.module or ""))
    if module is not None and module.replacement == ops.STRAIGHT_THROUGH:
        path = finding.module
        return (lambda: rt.ModuleEdit([path], rt.swap_forward(lambda x: x), "passed through for the score"),
                path)
    straight = straight_through_ops(finding.op) if finding.source is not None else None
    if straight is None:
        return None
    file, line = finding.source.file, finding.source.line
    names = set(straight[0])
    return (lambda: rt.OpAtLine(file, line, names, rt.identity, "passed through for the score"),
            f"{os.path.basename(file)}:{line}")
