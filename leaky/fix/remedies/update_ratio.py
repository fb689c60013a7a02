"""LK202's fix (checks/update_ratio.py): the learning rate × 0.1 when updates are too large
for the weights, × 10 when too small."""
from __future__ import annotations

from leaky.finding import Finding
from leaky.fix.remedies import Candidate, Context, remedy, scaled_learning_rate


@remedy("LK202")
def update_ratio(finding: Finding, context: Context) -> list[Candidate]:
    return scaled_learning_rate(0.1 if finding.evidence.get("direction") == "high" else 10.0, finding, context)
