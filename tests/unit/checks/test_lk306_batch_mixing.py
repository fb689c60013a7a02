"""LK306 batch-mixing on hand-built stats: stats that must trigger it and stats that a naive rule
would misread but that must not (ruff-style fixtures, no training run)."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import batch_mixing, source, stats
from tests.check_cases import fires, quiet


def test_lk306_unit():
    finding = fires("LK306", stats(batch_mixing=(batch_mixing(source=source(line=12)),)))
    assert (finding.severity, finding.op, finding.source.line, finding.cause.line) == (Severity.ERROR, "view", 12, 12)
    assert "depends on 3 other samples of the batch of 8" in finding.message and "transpose" in finding.fix
    attention = fires("LK306", stats(batch_mixing=(batch_mixing(op="multi_head_attention_forward", module="attn",
                                                                time_major=True),)))
    assert "batch_first=True" in attention.fix
    routed = fires("LK306", stats(batch_mixing=(batch_mixing(by_design="mixture-of-experts-routing"),)))
    assert routed.severity is Severity.INFO
    quiet("LK306", stats(batch_mixing=(batch_mixing(mixed=False, op=None),)))          # per-sample
    quiet("LK306", stats(batch_mixing=(batch_mixing(judged=False, mixed=False),)))     # not judged
    quiet("LK306", stats(batch_mixing=(batch_mixing(by_design="graph-message-passing"),)))
    quiet("LK306", stats(batch_mixing=(batch_mixing(by_design="batch-norm-without-running-statistics"),)))
