"""Why `leaky fix` tries nothing for a finding, said once: a finding told under one that is
itself told under another names the first cause of the chain, not the chain nested."""
from __future__ import annotations

from leaky.finding import Finding, Severity
from leaky.fix.remedies import Context, propose
from leaky.stats import AuditStats


def _finding(code: str, name: str, module: str, explains: tuple = ()) -> Finding:
    return Finding(name, code, Severity.ERROR, f"{code} at {module}", "fix it", module, None, None, None,
                   {"explains": [{"code": c, "module": m} for c, m in explains]})


def test_a_chain_of_explained_findings_without_a_remedy_names_its_first_cause_once():
    cut = _finding("LK108", "no-gradient-path", "a", explains=(("LK108", "b"),))   # the cut starves b
    starved = _finding("LK108", "no-gradient-path", "b", explains=(("LK204", "c"),))   # b's loss stays flat
    flat = _finding("LK204", "loss-not-decreasing", "c")
    findings = [cut, starved, flat]
    context = Context(AuditStats.empty(), findings)
    assert propose(findings, context) == []
    first = "it follows from LK108 no-gradient-path, which has no mechanical fix"
    assert context.why_not[id(starved)] == first
    assert context.why_not[id(flat)] == first   # once: not "... (it follows from LK108 ...)"
    assert id(cut) not in context.why_not
