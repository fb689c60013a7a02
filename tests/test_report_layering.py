"""Reports render and never compute: nothing under leaky/report/ imports the recorder, the
statistics builders or the checks' internals, and every file there stays small."""
from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

import leaky

PACKAGE = Path(leaky.__file__).parent
REPORT = PACKAGE / "report"
# what a report may not import: what builds the statistics, and the checks' private helpers
FORBIDDEN = ("leaky.record", "leaky.derive", "leaky.fold", "leaky.fold_origins")
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> set[str]:
    """Every module the file imports, relative imports resolved; `from a import b` gives a and a.b."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _forbidden(name: str) -> bool:
    if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
        return True
    parts = name.split(".")
    return parts[:2] == ["leaky", "checks"] and len(parts) > 2 and parts[2].startswith("_")


REPORT_FILES = sorted(REPORT.rglob("*.py"))


def test_the_scan_sees_the_report_modules_and_their_imports():
    assert REPORT / "html" / "page.py" in REPORT_FILES
    imported = _imported(REPORT / "html" / "page.py")
    assert "leaky.report.html.values" in imported and "leaky.report._clean" in imported
    assert _forbidden("leaky.checks._util") and _forbidden("leaky.record.opmode") and _forbidden("leaky.fold")
    assert not _forbidden("leaky.checks") and not _forbidden("leaky.checks.CHECKS") and not _forbidden("leaky.stats")


@pytest.mark.parametrize("path", REPORT_FILES, ids=lambda p: str(p.relative_to(REPORT)))
def test_reports_import_no_recorder_no_derivation_and_no_check_internals(path):
    bad = sorted(name for name in _imported(path) if _forbidden(name))
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {bad}"


def test_every_report_file_is_at_most_500_lines():
    long = {str(p.relative_to(REPORT)): n for p in sorted(REPORT.rglob("*"))
            if p.is_file() and p.suffix in (".py", ".css")
            and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long


def test_the_page_css_is_package_data():
    tomllib = pytest.importorskip("tomllib")          # Python 3.11+
    pyproject = PACKAGE.parent / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("not a source checkout")
    globs = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]["leaky"]
    css = (REPORT / "html" / "page.css").relative_to(PACKAGE).as_posix()
    assert any(fnmatch.fnmatch(css, g) for g in globs), (css, globs)
