"""LK205's fix (checks/loss_diverging.py): the learning rate × 0.1."""
from __future__ import annotations

from leaky.finding import Finding
from leaky.fix.remedies import Candidate, Context, remedy, scaled_learning_rate


@remedy("LK205")
def diverging(finding: Finding, context: Context) -> list[Candidate]:
    # NOTE: a loss that turns NaN because an op produced one (LK107) is told under it, and
    # gets its fixes (`propose`), not a smaller step.
    return scaled_learning_rate(0.1, finding, context)
