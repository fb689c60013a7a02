"""LK104's fix (checks/exploding_gradient.py): clip the gradient norm at the norm it has
before it explodes (the median norm over the amplification leaky measured through depth)."""
from __future__ import annotations

from leaky.finding import Finding
from leaky.fix.remedies import Candidate, Context, clipped_gradient, remedy


@remedy("LK104")
def exploding(finding: Finding, context: Context) -> list[Candidate]:
    return clipped_gradient(finding, context, finding.evidence.get("ratio"))
