"""A recurrence whose gradient explodes (LK105) explains the large updates of its own
weights (LK202 too high): one story, whose fix is the root's (clip the gradient norm), not
'lower the learning rate' at a rate of 1e-4 (issue 30, one root cause, one story).

A real vanilla RNN (the zoo's rnn-exploding: orthogonal recurrent weight × 2) and its
healthy twin, real backward passes and SGD.
"""
from __future__ import annotations

from leaky.demo import audit_example
from leaky.zoo import get


def _by_code(report, code):
    return [f for f in report.findings if f.code == code]


def test_large_updates_in_an_exploding_recurrence_follow_from_it():
    report = audit_example(get("rnn-exploding"), steps=20)
    (root,) = _by_code(report, "LK105")
    high = [f for f in _by_code(report, "LK202") if f.evidence.get("direction") == "high" and f.module == root.module]
    assert high, [(f.code, f.module) for f in report.findings]
    for finding in high:
        assert finding.evidence["explained_by"] == ["LK105"]
        assert "Lower the learning rate" not in finding.fix and "clip_grad_norm_" in finding.fix
        assert finding.cause is not None and finding.cause.line == root.source.line
    order = [f.code for f in report.findings]
    assert order.index("LK105") < min(i for i, f in enumerate(report.findings) if f in high)


def test_a_healthy_recurrence_explains_nothing():
    report = audit_example(get("rnn-clipped-orthogonal"), steps=20)
    assert not _by_code(report, "LK105")
    assert not any("LK105" in (f.evidence.get("explained_by") or []) for f in report.findings)
