"""The layout of the package, checked: the data flows one way (record → derive → stats →
checks → findings → report), files import each other without cycles, no file is over
500 lines, and op vocabulary is spelled out only in leaky/ops.

Imports are read from the source (every `import` and `from ... import`, inside functions
too), except those under `if TYPE_CHECKING:`, which never run.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

LEAKY = Path(__file__).resolve().parents[2] / "leaky"
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(LEAKY.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


FILES = {_module_name(p): p for p in sorted(LEAKY.rglob("*.py"))}


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(name: str, typing_too: bool = False) -> set[str]:
    """The leaky modules this file imports (resolved to files), TYPE_CHECKING blocks aside
    unless `typing_too`."""
    path = FILES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking(node) and not typing_too:
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # NOTE: `from leaky import ops` depends on leaky/ops, not on leaky/__init__.py
            # (every import runs its parent packages' __init__: that is not a dependency).
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in FILES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {_file_of(target) for target in found if target.startswith("leaky")} - {None, name}


def _file_of(target: str) -> str | None:
    while target and target not in FILES:
        target = target.rpartition(".")[0]
    return target or None


GRAPH = {name: _imports(name) for name in FILES}
TYPED_GRAPH = {name: _imports(name, typing_too=True) for name in FILES}   # typing-only imports too


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


FORBIDDEN = {
    "leaky.record": ("leaky.derive", "leaky.checks", "leaky.report", "leaky.fix", "leaky.watch", "leaky.audit",
                     "leaky.cli", "leaky.notes", "leaky.rerun", "leaky.probe"),
    "leaky.checks": ("leaky.record", "leaky.derive", "leaky.report"),
    "leaky.report": ("leaky.record", "leaky.derive"),
    "leaky.ops": ("leaky.record", "leaky.derive", "leaky.checks", "leaky.report", "leaky.fix", "leaky.rerun"),
    # the re-runs (leaky/rerun/) come after the audit; `leaky fix` and `leaky probe` both use
    # them, and neither uses the other
    "leaky.rerun": ("leaky.fix", "leaky.probe", "leaky.cli", "leaky.watch"),
    "leaky.fix": ("leaky.probe",),
    "leaky.probe": ("leaky.fix",),
    # `leaky diff` compares two reports (report-v1 dicts): it reads no statistic and no check
    # of its own, and runs a program only through leaky/rerun/
    "leaky.diff": ("leaky.record", "leaky.derive", "leaky.checks", "leaky.fix", "leaky.probe", "leaky.cli",
                   "leaky.watch"),
}


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_each_layer_imports_only_what_comes_before_it(layer):
    wrong = sorted(f"{name} imports {target}" for name, targets in GRAPH.items() if _under(name, layer)
                   for target in targets if any(_under(target, f) for f in FORBIDDEN[layer]))
    assert wrong == []


def test_reports_use_no_check_internals():
    wrong = sorted(f"{name} imports {target}" for name, targets in GRAPH.items() if _under(name, "leaky.report")
                   for target in targets if _under(target, "leaky.checks") and target.rpartition(".")[2].startswith("_"))
    assert wrong == []


def _private_imports(package: str) -> list[str]:
    """`from X import _name` (or from a module named `_x`) in `package`'s files, X in another
    top-level package of leaky."""
    found = []
    for name, path in FILES.items():
        if not _under(name, package):
            continue
        own = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                base = ".".join(own.split(".")[:len(own.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if _under(target, "leaky") and not _under(target, package) and \
                        any(part.startswith("_") and not part.startswith("__") for part in target.split(".")):
                    found.append(f"{name} imports {target}")
    return sorted(found)


@pytest.mark.parametrize("package", ["leaky.probe", "leaky.rerun"])
def test_the_rerun_users_import_nothing_private_from_another_package(package):
    """What `leaky probe` shares with `leaky fix` is public in leaky/rerun/ (issue 31: probe
    imported fix's `_same`)."""
    assert _private_imports(package) == []


def test_the_private_import_scan_sees_one():
    # fix/remedies reads checks' helper modules: the scan that guards probe/ would catch it
    assert "leaky.fix.remedies.vanishing_gradient imports leaky.checks._depth.depth_profile" in \
        _private_imports("leaky.fix")


def _cycle(graph: dict[str, set[str]] = GRAPH) -> list[str] | None:
    """One import cycle between files, if there is any (depth-first search)."""
    GRAPH = graph
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for target in sorted(GRAPH[name]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(GRAPH):
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


def test_no_import_cycles_between_files():
    cycle = _cycle()
    assert cycle is None, " -> ".join(cycle)


def test_no_cycle_even_with_typing_only_imports():
    """A file that names another only for its types still depends on its shape: record/'s
    instruments type the recorder by the narrow role they use (record/roles.py), so no
    cycle remains with those imports counted."""
    cycle = _cycle(TYPED_GRAPH)
    assert cycle is None, " -> ".join(cycle)


def test_no_file_is_over_500_lines():
    long = sorted(f"{p.relative_to(LEAKY.parent)}: {n}" for p in LEAKY.rglob("*")
                  if p.suffix in (".py", ".css") and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES)
    assert long == []


def test_the_scan_sees_imports_a_layer_rule_would_catch():
    # it reads real edges (so a rule can fail): the recorder's op knowledge, relative imports
    assert "leaky.ops" in GRAPH["leaky.record.recorder"]
    assert "leaky.report.html.values" in GRAPH["leaky.report.html.page"]
    assert "leaky.record.step_record" in GRAPH["leaky.derive.accumulate"]
    # and TYPE_CHECKING imports are not edges: record/compiled.py names Recorder only for types
    assert "leaky.record.recorder" not in GRAPH["leaky.record.compiled"]


def test_the_page_css_is_package_data():
    import fnmatch

    tomllib = pytest.importorskip("tomllib")          # Python 3.11+
    pyproject = LEAKY.parent / "pyproject.toml"
    globs = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]["leaky"]
    css = (LEAKY / "report" / "html" / "page.css").relative_to(LEAKY).as_posix()
    assert any(fnmatch.fnmatch(css, g) for g in globs), (css, globs)


# -- op vocabulary -------------------------------------------------------------------------
def _literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant that is not a docstring."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


# Op spellings that are also ordinary names in leaky's code, with another meaning: a JSON
# key ("where" a finding is), an attribute or module name (`.item`, numpy), leaky fix's
# name for gradient clipping.
AMBIGUOUS = frozenset({"where", "item", "numpy", "clip"})


def _vocabulary_word(text: str, names: frozenset[str], nodes: frozenset[str]) -> bool:
    """An op spelling, or an autograd node or nn.Module class name (a registered prefix)."""
    if text in names and text not in AMBIGUOUS:
        return True
    return text.isidentifier() and text[:1].isupper() and any(text.startswith(prefix) for prefix in nodes)


def test_op_vocabulary_is_spelled_out_only_in_leaky_ops():
    from leaky import ops

    names, nodes = ops.vocabulary()
    # NOTE: the built-in examples are user programs (their Expect names the op to find), and
    # a check's registry name is not an op.
    # leaky.testing builds hand-made stats for tests, the way the zoo builds models: its
    # defaults name example ops.
    skip = ("leaky/ops/", "leaky/zoo/", "leaky/testing.py")
    found = []
    for path in sorted(LEAKY.rglob("*.py")):
        where = path.relative_to(LEAKY.parent).as_posix()
        if where.startswith(skip):
            continue
        found.extend(f"{where}:{line} {text!r}" for line, text in _literals(path) if _vocabulary_word(text, names, nodes))
    assert found == []


def test_every_check_file_is_discovered_and_registers_in_code_order():
    """A check is one file in leaky/checks/ (helpers start with an underscore): it is found
    and registered without a hand-written list, every file registers at least one check, and
    the catalog is in the order of the codes."""
    from leaky.checks import CHECKS

    files = {p.stem for p in (LEAKY / "checks").glob("*.py") if not p.stem.startswith("_")}
    registered = {check.run.__module__.rsplit(".", 1)[-1] for check in CHECKS.values()}
    assert registered == files
    assert list(CHECKS) == sorted(CHECKS)
    init = (LEAKY / "checks" / "__init__.py").read_text()
    assert not any(f'"{name}"' in init for name in files), "checks/__init__.py lists a check by hand"


def test_every_remedy_file_is_named_like_its_check_and_discovered():
    """`leaky fix`'s remedies mirror the checks: one file in leaky/fix/remedies/ per check with
    a remedy, named like the check's file (helpers start with an underscore), found without a
    hand-written list, and each registers the remedy of that check's code."""
    from leaky.checks import CHECKS
    from leaky.fix.remedies import REMEDIES

    files = {p.stem for p in (LEAKY / "fix" / "remedies").glob("*.py") if not p.stem.startswith("_")}
    registered = {code: function.__module__.rsplit(".", 1)[-1] for code, function in REMEDIES.items()}
    assert set(registered.values()) == files
    assert registered == {code: CHECKS[code].name.replace("-", "_") for code in REMEDIES}
    assert not any(_under(target, "leaky.fix.remedies") for target in GRAPH["leaky.fix.remedies"]), \
        "fix/remedies/__init__.py imports a remedy by hand"


def test_each_headline_number_is_declared_in_its_own_check():
    """What `leaky fix` shows before -> after for a finding is the check's own headline,
    declared beside its judgement (no second table of metrics to drift from it)."""
    from leaky.checks import CHECKS, HEADLINES

    assert HEADLINES, "no check declares a headline number"
    for code, (label, read) in HEADLINES.items():
        assert code in CHECKS and label
        assert read.__module__ == CHECKS[code].run.__module__, (code, read.__module__)
    metrics = (LEAKY / "fix" / "metrics.py").read_text()
    assert "@metric" not in metrics and "def _" not in metrics


def test_the_causes_a_check_names_are_declared_at_its_registration():
    """Which findings can explain a check's (a flat loss by dead units, ...) is declared once,
    in its registration: every code there is a registered check, and its page lists them."""
    from leaky.checks import CHECKS
    from leaky.explain import page_text

    declaring = [check for check in CHECKS.values() if check.explained_by]
    assert {check.code for check in declaring} >= {"LK204", "LK205", "LK308"}
    for check in declaring:
        assert all(code in CHECKS and code != check.code for code in check.explained_by)
        page = page_text(check.code)
        assert all(f"{code} {CHECKS[code].name}" in page for code in check.explained_by)
    sources = "".join(p.read_text() for p in (LEAKY / "checks").glob("*.py"))
    assert "_EXPLAINS" not in sources and "_CAUSES" not in sources


def test_derive_reads_the_record_only_through_its_run_record():
    """derive/ is given a frozen RunRecord (Recorder.snapshot()) and the running sums, never the
    Recorder: no file of it names the Recorder or imports its module, and assemble.py reads of
    the run record only its declared fields, none private."""
    from dataclasses import fields

    from leaky.record.run_record import RunRecord

    derive = {name: FILES[name] for name in FILES if _under(name, "leaky.derive")}
    naming = sorted(name for name, path in derive.items()
                    if "Recorder" in (text := path.read_text(encoding="utf-8")) or "record.recorder" in text)
    importing = sorted(name for name in derive if "leaky.record.recorder" in GRAPH[name])
    assert naming == [] and importing == []

    tree = ast.parse(FILES["leaky.derive.assemble"].read_text(encoding="utf-8"))

    def is_run(node: ast.AST) -> bool:   # `run` or `self.run`
        return (isinstance(node, ast.Name) and node.id == "run") or (
            isinstance(node, ast.Attribute) and node.attr == "run" and isinstance(node.value, ast.Name)
            and node.value.id == "self")

    reads = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and is_run(node.value)}
    assert {"optimizer_exists", "idle_at", "sites", "cuts"} <= reads   # the scan sees the real reads
    assert sorted(r for r in reads if r.startswith("_")) == []
    assert reads <= {f.name for f in fields(RunRecord)}
