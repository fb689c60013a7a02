"""Start-up: the commands that never touch torch answer without importing it, and the
package's public names still resolve (torch's import alone takes 1.5 s, more on a busy machine)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = str(Path(os.path.abspath(__file__)).parents[2])

# Runs the CLI in a fresh interpreter, then says which heavy modules it imported.
PROBE = """
import contextlib, io, json, sys
from leaky.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "numpy": "numpy" in sys.modules}))
"""


def _fresh(code: str, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("argv", [["--help"], ["explain"], ["explain", "LK106"], ["explain", "dead-zone"],
                                  ["runs", "--store", "no-such-store.db"], ["show", "--store", "no-such-store.db"],
                                  ["bogus"], ["audit", "--help"]])
def test_commands_that_need_no_torch_do_not_import_it(argv):
    seen = json.loads(_fresh(PROBE, *argv))
    assert not seen["torch"], f"`leaky {' '.join(argv)}` imported torch"
    assert not seen["numpy"], f"`leaky {' '.join(argv)}` imported numpy"


def test_import_leaky_is_light_and_its_names_resolve():
    code = ("import sys, leaky; light = 'torch' not in sys.modules; "
            "names = [leaky.audit, leaky.watch, leaky.Audit, leaky.Watch, leaky.AuditConfig, leaky.Finding, "
            "leaky.Severity, leaky.Source, leaky.Report, leaky.SCHEMA]; "
            "print(light, callable(leaky.audit), callable(leaky.watch), leaky.SCHEMA, "
            "set(leaky.__all__) <= set(dir(leaky)))")
    assert _fresh(code) == "True True True leaky/report-v1 True"


def test_leaky_audit_is_the_function_whatever_was_imported_first():
    """Importing the submodules first (as leaky's own modules do) still leaves `leaky.audit`
    and `leaky.watch` the functions, as when the package imported them eagerly."""
    code = ("import leaky.audit, leaky.watch, leaky, types; from leaky.audit import Audit; "
            "print(isinstance(leaky.audit, types.FunctionType), isinstance(leaky.watch, types.FunctionType), "
            "leaky.audit.__module__, leaky.Audit is Audit)")
    assert _fresh(code) == "True True leaky.audit True"


def test_an_unknown_name_is_an_attribute_error():
    import leaky

    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        leaky.nonesuch  # noqa: B018
