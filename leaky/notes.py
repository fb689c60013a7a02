"""Run notes: what a report does not judge, and why, one plain line each.

A check that stays quiet because its premise does not hold (the update-ratio band for a
quasi-Newton step, a loss trend for an adversarial game) says so once, so that a person can
tell "leaky looked and found nothing" from "leaky did not judge this". Each note is
declared beside its check (`@checks.note("LK202")`), so the note and the decision read the
same facts; this gathers them in the order of the checks' codes.
"""
from __future__ import annotations

from leaky.checks import run_notes as _checks_notes
from leaky.config import AuditConfig
from leaky.stats import AuditStats


def run_notes(stats: AuditStats, config: AuditConfig | None = None) -> list[str]:
    """The notes for these stats, judged with `config` (the defaults when None)."""
    return _checks_notes(stats, config or AuditConfig())
