"""LK302's fix (checks/bad_initialization.py): re-initialise the layer with the init its
nonlinearity wants (`ops.init_for`), bias 0."""
from __future__ import annotations

from leaky.finding import Finding
from leaky.fix.remedies import Candidate, Context, reinit, remedy


@remedy("LK302")
def bad_initialization(finding: Finding, context: Context) -> list[Candidate]:
    if finding.module is None:
        return []
    return [reinit(finding.module, finding.evidence.get("next_nonlinearity"), finding, context)]
