"""SARIF 2.1.0: findings as code-scanning results, so CI annotates the offending line.

Rendered from the same findings as every other view; the rule help is the check's
`leaky explain` page.
"""
from __future__ import annotations

import json
import os

from leaky.checks import CHECKS
from leaky.explain import page_text
from leaky.finding import Severity

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _rule(check) -> dict:
    page = page_text(check.code)
    return {
        "id": check.code,
        "name": check.name,
        "shortDescription": {"text": check.summary},
        "fullDescription": {"text": check.summary},
        "help": {"text": page, "markdown": page},
        "helpUri": f"https://github.com/leaky/leaky/blob/main/leaky/pages/{check.code}-{check.name}.md",
        "properties": {"tags": ["gradient-flow", "pytorch"]},
    }


def _uri(path: str, root: str | None) -> str:
    if root:
        try:
            rel = os.path.relpath(path, root)
            if not rel.startswith(".."):
                return rel.replace(os.sep, "/")
        except ValueError:
            pass
    return path.replace(os.sep, "/")


def _result(finding, rule_index: dict, root: str | None) -> dict:
    result = {
        "ruleId": finding.code,
        "ruleIndex": rule_index[finding.code],
        "level": _LEVEL[finding.severity],
        "message": {"text": f"{finding.message} Fix: {finding.fix}"},
        "properties": {"name": finding.name, "module": finding.module, "op": finding.op, "step": finding.step,
                       "evidence": finding.evidence},
    }
    if finding.source is not None:
        result["locations"] = [{"physicalLocation": {
            "artifactLocation": {"uri": _uri(finding.source.file, root)},
            "region": {"startLine": finding.source.line}}}]
    if finding.cause is not None:     # the line to change, where it is not where the leak shows
        result["relatedLocations"] = [{"id": 0, "message": {"text": f"change: {finding.cause.what}"},
                                       "physicalLocation": {
                                           "artifactLocation": {"uri": _uri(finding.cause.file, root)},
                                           "region": {"startLine": finding.cause.line}}}]
        if finding.source is None:
            result["locations"] = [{"physicalLocation": result["relatedLocations"][0]["physicalLocation"]}]
    return result


def to_sarif(report, root: str | None = None) -> dict:
    """A SARIF log with one run; file paths relative to `root` when they are inside it."""
    from leaky.version import __version__

    rules = [_rule(check) for check in CHECKS.values()]
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "leaky", "version": __version__, "semanticVersion": __version__,
                                "informationUri": "https://github.com/leaky/leaky", "rules": rules}},
            "results": [_result(f, index, root) for f in report.findings],
            "properties": {"schema": "leaky/report-v1", "run": report.to_dict()["run"]},
        }],
    }


def to_sarif_json(report, root: str | None = None) -> str:
    return json.dumps(to_sarif(report, root), indent=2, ensure_ascii=False, default=str)
