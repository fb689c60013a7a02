"""Run one check on hand-built stats, ruff-style: `fires` where it must report, `quiet`
where it must not. tests/meta/test_hand_built_stats.py checks that every registered code has both."""
from __future__ import annotations

from leaky.checks import CHECKS, HEADLINES
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity, Source
from leaky.stats import AuditStats

CONFIG = AuditConfig()


def findings_of(code: str, stats: AuditStats, *, config: AuditConfig = CONFIG,
                causes: tuple[Finding, ...] = ()) -> list[Finding]:
    """The check's findings; a loss check (links=True) also gets `causes`, the other findings."""
    check = CHECKS[code]
    found = check.run(stats, config, list(causes)) if check.links else check.run(stats, config)
    assert all(f.code == code and f.name == check.name for f in found), found
    return found


def fires(code: str, stats: AuditStats, *, config: AuditConfig = CONFIG,
          causes: tuple[Finding, ...] = ()) -> Finding:
    """The one finding the check makes on these stats."""
    found = findings_of(code, stats, config=config, causes=causes)
    assert len(found) == 1, [f.message for f in found]
    _headline_resolves(found[0], stats)
    return found[0]


def _headline_resolves(finding: Finding, stats: AuditStats) -> None:
    """A firing check's declared headline (what `leaky fix` shows before -> after) reads the
    very stats it fired on: a value, (what is measured, a value), or None where these stats
    do not place it (a hand-built finding has no source line; tests/meta/test_pages_and_headlines.py
    reads each headline on a real run)."""
    if finding.code in HEADLINES:
        label, read = HEADLINES[finding.code]
        value = read(finding, stats)
        assert label and (value is None or isinstance(value, str) or (
            isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value))), (finding.code, value)


def quiet(code: str, stats: AuditStats, *, config: AuditConfig = CONFIG, causes: tuple[Finding, ...] = (),
          below: Severity | None = None) -> list[Finding]:
    """Assert the check reports nothing here (with `below`: nothing at that severity or
    above); returns what it did report."""
    found = findings_of(code, stats, config=config, causes=causes)
    loud = [f for f in found if below is None or f.severity.rank >= below.rank]
    assert not loud, [(f.severity.value, f.message) for f in loud]
    return found


def cause(code: str, severity: Severity = Severity.WARNING, *, module: str = "fc1", op: str | None = "relu",
          line: int = 20, evidence: dict | None = None) -> Finding:
    """Another check's finding, as LK204/LK205 receive it."""
    return Finding(CHECKS[code].name, code, severity, f"{code} here", f"fix for {code}", module, op,
                   Source("train.py", line), 3, dict(evidence or {}))
