"""The check catalog: one file per check, registered under a stable code and name.

A check is a pure function `(AuditStats, AuditConfig) -> list[Finding]`. It never touches
hooks and never prints. Its explanation page is `leaky/pages/<CODE>-<name>.md`. A probe
check (LK308, LK309: `probe=True`) is judged by `leaky probe` on what its active runs
measured, `(leaky.probe.stats record, ProbeConfig) -> list[Finding]`; an audit skips it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from contextlib import contextmanager
from typing import Callable, Iterator

from leaky.config import AuditConfig
from leaky.finding import Cause, Finding
from leaky.registry import discover
from leaky.stats import AuditStats
from leaky.story import story_order

CheckFn = Callable[[AuditStats, AuditConfig], list[Finding]]
# (root, symptom) -> why the root explains the symptom, in the run's numbers; None: it does not
Explainer = Callable[[Finding, Finding], "str | None"]


@dataclass(frozen=True)
class Check:
    code: str
    name: str
    summary: str
    run: CheckFn
    links: bool = False   # runs after the others and receives their findings, to name a cause
    probe: bool = False   # judged by `leaky probe` on its runs' measurements, not by an audit
    # the codes whose findings can explain this check's, root causes before their consequences:
    # the one table a check that names a cause (links=True, or a probe) reads its candidates from
    explained_by: tuple[str, ...] = ()
    page: str | None = None   # its page's path, for a check kept outside leaky (else leaky/pages/<CODE>-<name>.md)


CHECKS: dict[str, Check] = {}
EXPLAINERS: dict[str, list[Explainer]] = {}   # a root cause's code -> how it explains other findings
# the value, or (what is measured, the value) where that depends on the finding; None: not measured
Headline = Callable[[Finding, AuditStats], "str | tuple[str, str] | None"]
HEADLINES: dict[str, tuple[str, Headline]] = {}   # a check's code -> (what its number is, how to read it)
NoteFn = Callable[[AuditStats, AuditConfig], list[str]]
NOTES: dict[str, list[NoteFn]] = {}   # a check's code -> what it leaves unjudged in a run, and why

def register(code: str, name: str, summary: str, links: bool = False, probe: bool = False,
             explained_by: tuple[str, ...] = (), page: str | None = None) -> Callable[[CheckFn], CheckFn]:
    """Add a check. With links=True it is called as fn(stats, config, findings_of_the_others);
    with probe=True only `leaky probe` calls it, on its runs' measurements. `explained_by`:
    the codes whose findings can explain its findings, in the order they are preferred.
    `page`: the path of its page, for a check kept outside leaky/checks (else leaky/pages/)."""
    def add(fn: CheckFn) -> CheckFn:
        if code in CHECKS:
            raise ValueError(f"check code {code} registered twice")
        CHECKS[code] = Check(code, name, summary, fn, links, probe, tuple(explained_by), page)
        return fn
    return add


@contextmanager
def restored() -> Iterator[None]:
    """The catalog as it was (checks, explainers, headlines, notes), after the block: for tests
    that register a check."""
    before = (dict(CHECKS), {code: list(fns) for code, fns in EXPLAINERS.items()}, dict(HEADLINES),
              {code: list(fns) for code, fns in NOTES.items()})
    try:
        yield
    finally:
        for table, saved in zip((CHECKS, EXPLAINERS, HEADLINES, NOTES), before):
            table.clear()
            table.update(saved)


def explained_by(code: str) -> tuple[str, ...]:
    """The codes that can explain check `code`'s findings, as its registration declares."""
    return CHECKS[code].explained_by


def explainer(code: str) -> Callable[[Explainer], Explainer]:
    """Declare which findings of other checks the findings of check `code` explain: the
    function gets (root, symptom) and returns why, or None. A symptom it explains is told
    as part of the root's story (`_told_under`)."""
    def add(fn: Explainer) -> Explainer:
        EXPLAINERS.setdefault(code, []).append(fn)
        return fn
    return add


def headline(code: str, label: str) -> Callable[[Headline], Headline]:
    """Declare check `code`'s headline number: what `leaky fix` shows before -> after a fix,
    read from a run's statistics at the finding's place (so a fixed run that no longer
    triggers the check still has its number)."""
    def add(fn: Headline) -> Headline:
        HEADLINES[code] = (label, fn)
        return fn
    return add


def note(code: str) -> Callable[[NoteFn], NoteFn]:
    """Declare what check `code` leaves unjudged in a run, and why: a function of (stats,
    config) giving one plain line per thing (an optimizer whose step is not one scaled
    gradient step, for LK202). It sits beside the check, so the note and the decision to
    stay quiet read the same facts."""
    def add(fn: NoteFn) -> NoteFn:
        NOTES.setdefault(code, []).append(fn)
        return fn
    return add


def run_notes(stats: AuditStats, config: AuditConfig) -> list[str]:
    """Every check's notes for this run, in the order of the checks' codes."""
    return [line for code in CHECKS for make in NOTES.get(code, ()) for line in make(stats, config)]


def lookup(key: str) -> Check:
    """A check by code (LK106) or name (dead-zone), case-insensitive."""
    wanted = key.strip().lower()
    for check in CHECKS.values():
        if wanted in (check.code.lower(), check.name):
            return check
    known = ", ".join(f"{c.code} {c.name}" for c in CHECKS.values())
    raise KeyError(f"no check called {key!r}; known checks: {known}")


def run_all(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings: list[Finding] = []
    audited = [check for check in CHECKS.values() if not check.probe]
    for check in audited:
        if not check.links:
            findings.extend(check.run(stats, config))
    findings = [_told_under(finding, findings) for finding in findings]
    causes = list(findings)
    for check in audited:
        if check.links:
            findings.extend(check.run(stats, config, causes))
    return sort_findings(findings)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Story order (leaky/story.py): most severe first, but a root cause right before the
    findings it explains (its code in their evidence `explained_by`, or their code and module
    in its own evidence `explains`), each story ranked by its most severe finding."""
    return story_order(findings)


def _told_under(symptom: Finding, findings: list[Finding]) -> Finding:
    """The finding as part of the story of the first other finding that explains it (by that
    check's `explainer`): its numbers stay, its advice becomes the root's, and the line to
    change is the root's. Advice of its own (raise the rate, freeze on purpose) would
    contradict the root cause it follows from."""
    for root in findings:
        for explain in EXPLAINERS.get(root.code, ()) if root is not symptom else ():
            why = explain(root, symptom)
            if why:
                evidence = {**symptom.evidence, "explained_by": [root.code]}
                cause = root.cause or Cause.at(root.source, f"{root.code} {root.name} starts here: {why}")
                return replace(symptom, message=f"{symptom.message} This follows from {root.code} {root.name}: {why}.",
                               fix=f"Fix {root.code} {root.name} first, which this follows from: {root.fix}",
                               evidence=evidence, cause=cause)
    return symptom


def _discover() -> None:
    """Import every check: the package's modules but its helpers (a leading underscore). Each
    registers itself on import; they run, and are listed, in the order of their codes."""
    discover(__name__, __path__)
    ordered = sorted(CHECKS.values(), key=lambda check: check.code)
    CHECKS.clear()
    CHECKS.update((check.code, check) for check in ordered)


_discover()
