"""Every check's knowledge resolves where it is declared: its page is found and every
threshold and derivative in it is filled from the config and the op rules; its headline
number (what `leaky fix` shows before -> after, declared beside the check) reads a value on
a real run where the check fires, one broken zoo example per check."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

import leaky
from leaky.checks import CHECKS, HEADLINES
from leaky.config import AuditConfig
from leaky.explain import page_text
from leaky.zoo import EXAMPLES


@pytest.mark.parametrize("code", sorted(CHECKS))
def test_every_checks_page_resolves_with_its_numbers_filled(code):
    check = CHECKS[code]
    page = page_text(code)
    assert page.startswith(f"# {code} {check.name}") and "{{" not in page and "}}" not in page
    for name in set(re.findall(r"\{\{config\.(\w+)", _raw_page(check))):
        other = replace(AuditConfig(), **{name: getattr(AuditConfig(), name) * 0.37})
        assert page_text(code, other) != page, name   # the number comes from the config given


def _raw_page(check) -> str:
    from importlib import resources
    return resources.files("leaky").joinpath("pages", f"{check.code}-{check.name}.md").read_text("utf-8")


def _first_broken_example(code: str):
    return next((ex for name, ex in sorted(EXAMPLES.items())
                 if not ex.healthy and any(e.code == code for e in ex.expect)), None)


@pytest.mark.parametrize("code", sorted(HEADLINES))
def test_every_declared_headline_reads_a_number_where_its_check_fires(code):
    example = _first_broken_example(code)
    assert example is not None, f"{code} declares a headline but no zoo example triggers it"
    with leaky.audit(steps=20) as observed:
        try:
            example.run(steps=20, seed=0)
        except Exception:
            if not example.raises:
                raise
    found = observed.report.by_code(code)
    assert found, (example.name, [f.code for f in observed.report.findings])
    label, read = HEADLINES[code]
    values = [read(finding, observed.stats) for finding in found]
    assert label and all(v is not None for v in values), (example.name, values)
    number = values[0] if isinstance(values[0], str) else values[0][1]
    assert re.search(r"\d", number), number


def test_a_check_with_no_headline_is_one_leaky_fix_shows_no_number_for():
    """The checks that declare none: what `leaky fix` verifies for them is the finding gone."""
    assert set(CHECKS) - set(HEADLINES) and set(HEADLINES) <= set(CHECKS)


def test_every_note_is_declared_beside_its_check():
    """What a check leaves unjudged, and why, is written in the check's own file."""
    from leaky.checks import NOTES

    assert {"LK202", "LK204"} <= set(NOTES)
    for code, makes in NOTES.items():
        assert code in CHECKS and all(make.__module__ == CHECKS[code].run.__module__ for make in makes), code
