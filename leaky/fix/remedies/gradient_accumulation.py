"""LK203's fix (checks/gradient_accumulation.py): zero the gradients after every step."""
from __future__ import annotations

from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.remedies import Candidate, Context, remedy


@remedy("LK203")
def accumulation(finding: Finding, context: Context) -> list[Candidate]:
    site = context.backward_site
    opt = (edits.optimizer_variable(site[0], site[1]) if site else None) or "optimizer"
    return [Candidate(("zero-grad",), "zero the gradients every step", [finding], [rt.zero_grad_after_step], [],
                      [lambda: (edits.insert_line(site[0], site[1], f"{opt}.zero_grad()", after=False) if site
                                else None) or edits.snippet(f"{opt}.zero_grad()   # before loss.backward()")])]
