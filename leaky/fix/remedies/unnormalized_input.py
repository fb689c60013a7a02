"""LK303's fix (checks/unnormalized_input.py): standardise the layer's input with the mean
and std leaky measured."""
from __future__ import annotations

from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.remedies import Candidate, Context, remedy


@remedy("LK303")
def unnormalized_input(finding: Finding, context: Context) -> list[Candidate]:
    mean, std = finding.evidence.get("mean"), finding.evidence.get("std")
    if finding.module is None or not mean or not std:
        return []
    layer = finding.module
    return [Candidate(("standardise", layer), "standardise the input (mean and std leaky measured)", [finding],
                      [lambda: rt.ModuleEdit([layer], rt.standardise_input(mean, std), "standardised")], [layer],
                      [lambda: edits.snippet("mean, std = x_train.mean(0), x_train.std(0)   # once, on the "
                                             "training set\nx = (x - mean) / std                           "
                                             f"# every input to {layer}")])]
