"""The run store: round trips, schema versions, bad files, SIGKILL, concurrent writers."""
from __future__ import annotations

import math
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from leaky import store as store_mod
from leaky.store import MIGRATIONS, SCHEMA_VERSION, Store, StoreError, git_commit, resolve_run

REPO = Path(__file__).resolve().parents[3]
CHILD_TIMEOUT_S = 60


def _start(store: Store, script: str = "train.py") -> int:
    return store.start_run(script, ["--epochs", "3"], torch_version="2.x", leaky_version="0.1.0",
                           device="cpu", git_commit=None)


def _finding(code="LK101", module=None, severity="warning", source=None, message="m", evidence=None,
             fix="use leaky_relu"):
    return {"name": "dead-zone", "code": code, "severity": severity, "module": module, "op": None,
            "source": source, "step": None, "message": message, "evidence": evidence or {},
            "fix": fix}


def _user_version(path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


# -- round trips ----------------------------------------------------------------

def test_run_round_trip(tmp_path):
    with Store(tmp_path / "runs.db") as store:
        run = _start(store)
        got = store.run(run)
        assert got["script"] == "train.py" and got["argv"] == ["--epochs", "3"]
        assert got["status"] == "running" and got["ended"] is None and got["pid"] == os.getpid()
        assert got["alive"] is True and got["steps"] == 0 and got["last_loss"] is None
        store.end_run(run, "failed", error="RuntimeError: boom")
        got = store.run(run)
        assert got["status"] == "failed" and got["error"] == "RuntimeError: boom"
        assert got["ended"] >= got["started"] and got["alive"] is False
        with pytest.raises(StoreError):
            store.end_run(run, "exploded")


def test_runs_newest_first_and_resolve(tmp_path):
    with Store(tmp_path / "runs.db") as store:
        with pytest.raises(StoreError, match="no runs"):
            resolve_run(store, "latest")
        first, second = _start(store, "a.py"), _start(store, "b.py")
        assert [r["id"] for r in store.runs()] == [second, first]
        assert resolve_run(store, "latest") == resolve_run(store, "last") == second
        assert resolve_run(store, str(first)) == first
        for bad in ("999", "yesterday"):
            with pytest.raises(StoreError):
                resolve_run(store, bad)
        with pytest.raises(StoreError, match="no run 999"):
            store.run(999)


def test_steps_round_trip_with_nonfinite(tmp_path):
    with Store(tmp_path / "runs.db") as store:
        run = _start(store)
        store.add_steps(run, [(0, 2.5, 1.0, False), (1, float("nan"), 3.0, False),
                              (2, 1.5, float("inf"), False), (3, None, None, True)])
        store.add_steps(run, [(4, 1.25, 0.5, False)])
        steps = store.steps(run)
        assert [s["step"] for s in steps] == [0, 1, 2, 3, 4]
        assert steps[0] == {"step": 0, "loss": 2.5, "grad_norm": 1.0, "nonfinite": False}
        assert steps[1] == {"step": 1, "loss": None, "grad_norm": 3.0, "nonfinite": True}
        assert steps[2] == {"step": 2, "loss": 1.5, "grad_norm": None, "nonfinite": True}
        assert steps[3]["nonfinite"] is True and steps[3]["loss"] is None
        got = store.run(run)
        assert got["steps"] == 5 and got["last_loss"] == 1.25


def test_module_stats_round_trip(tmp_path):
    with Store(tmp_path / "runs.db") as store:
        run = _start(store)
        store.add_module_stats(run, 7, [
            {"module": "fc1", "grad_norm": 0.5, "gain": 1.1, "dead_share": 0.2,
             "saturated_share": 0.0, "update_ratio": 1e-3},
            {"module": "", "grad_norm": float("nan")},          # root module, missing keys
        ])
        rows = store.module_stats(run)
        assert rows[0] == {"step": 7, "module": "", "grad_norm": None, "gain": None, "dead_share": None,
                           "saturated_share": None, "update_ratio": None}
        assert rows[1]["module"] == "fc1" and rows[1]["update_ratio"] == pytest.approx(1e-3)


def test_findings_new_then_updated(tmp_path):
    src = {"file": "train.py", "line": 12}
    with Store(tmp_path / "runs.db") as store:
        run = _start(store)
        assert store.record_finding(run, _finding(module=None), step=3) is True
        assert store.record_finding(run, _finding(module=None, severity="error", message="worse",
                                                  evidence={"share": 0.9}, fix="lower the rate"), step=9) is False
        assert store.record_finding(run, _finding(module="", source=src), step=5) is True   # root != None
        assert store.record_finding(run, _finding(module="fc1", source=src), step=5) is True
        assert store.record_finding(run, _finding(module="fc1", source=src), step=None) is False
        other = _start(store)
        assert store.record_finding(other, _finding(module=None), step=1) is True   # per run

        found = store.findings(run)
        assert len(found) == 3
        model_wide = found[0]
        assert model_wide["module"] is None and model_wide["source"] is None and model_wide["op"] is None
        assert (model_wide["first_step"], model_wide["last_step"]) == (3, 9)
        assert model_wide["severity"] == "error" and model_wide["message"] == "worse"
        assert model_wide["evidence"] == {"share": 0.9} and model_wide["fix"] == "lower the rate"   # the last said
        assert {f["module"] for f in found[1:]} == {"", "fc1"}
        assert all(f["source"] == src and (f["first_step"], f["last_step"]) == (5, 5) for f in found[1:])
        counts = store.run(run)
        assert (counts["findings"], counts["errors"]) == (3, 1)


def test_findings_order_and_nonfinite_evidence(tmp_path):
    with Store(tmp_path / "runs.db") as store:
        run = _start(store)
        store.record_finding(run, _finding(code="LK2", severity="info"), step=2)
        store.record_finding(run, _finding(code="LK3", severity="warning"), step=1)
        store.record_finding(run, _finding(code="LK4", severity="error"), step=2)
        store.record_finding(run, _finding(code="LK5", evidence={"ratio": float("inf")}), step=None)
        found = store.findings(run)
        assert [f["code"] for f in found] == ["LK3", "LK4", "LK2", "LK5"]
        assert found[-1]["evidence"]["ratio"] == math.inf


def test_git_commit(tmp_path):
    assert git_commit(str(tmp_path)) is None
    sha = git_commit(str(REPO / "leaky" / "store.py"))
    assert sha is None or len(sha) == 40


# -- schema -------------------------------------------------------------------

def test_schema_version_and_pragmas(tmp_path):
    path = tmp_path / "runs.db"
    Store(path).close()
    assert _user_version(path) == SCHEMA_VERSION == MIGRATIONS[-1][0]
    assert [v for v, _ in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    with Store(path) as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "runs.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match="newer") as err:
        Store(path)
    assert "schema 99" in str(err.value) and f"knows {SCHEMA_VERSION}" in str(err.value)


@pytest.mark.parametrize("version", range(0, SCHEMA_VERSION + 1))
def test_migrates_from_every_earlier_version(tmp_path, version):
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path)
    for target, statements in MIGRATIONS:
        if target <= version:
            for sql in statements:
                conn.execute(sql)
    conn.execute(f"PRAGMA user_version = {version}")
    if version >= 1:   # columns every version has
        conn.execute("INSERT INTO runs (id, script, argv, started, status) "
                     "VALUES (41, 'old.py', '[]', 1.0, 'finished')")
    conn.commit()
    conn.close()

    with Store(path) as store:
        assert _user_version(path) == SCHEMA_VERSION
        if version >= 1:
            assert store.run(41)["script"] == "old.py"
        run = _start(store)
        store.add_steps(run, [(0, 1.0, 1.0, False)])
        assert store.run(run)["steps"] == 1


def test_failed_migration_leaves_store_unchanged(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    with Store(path) as store:
        _start(store)
    bad = SCHEMA_VERSION + 1
    monkeypatch.setattr(store_mod, "MIGRATIONS",
                        [*MIGRATIONS, (bad, ["ALTER TABLE runs ADD COLUMN note TEXT", "NOT SQL"])])
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", bad)
    with pytest.raises(StoreError):
        Store(path)
    monkeypatch.undo()
    assert _user_version(path) == SCHEMA_VERSION
    with Store(path) as store:
        assert len(store.runs()) == 1 and "note" not in store.runs()[0]


# -- bad paths ---------------------------------------------------------------

def _assert_one_line(err: pytest.ExceptionInfo, path) -> None:
    message = str(err.value)
    assert "\n" not in message and str(path) in message


def test_corrupted_file(tmp_path):
    path = tmp_path / "runs.db"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(StoreError) as err:
        Store(path)
    _assert_one_line(err, path)
    assert "not a SQLite database" in str(err.value)


@pytest.mark.parametrize("where", ["missing-dir", "under-a-file", "a-directory"])
def test_unopenable_path(tmp_path, where):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    path = {"missing-dir": tmp_path / "nope" / "runs.db", "under-a-file": tmp_path / "file" / "runs.db",
            "a-directory": tmp_path / "dir"}[where]
    with pytest.raises(StoreError) as err:
        Store(path)
    _assert_one_line(err, path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores permissions")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(StoreError) as err:
            Store(ro / "runs.db")
        _assert_one_line(err, ro / "runs.db")
    finally:
        ro.chmod(0o755)


def test_closed_store(tmp_path):
    store = Store(tmp_path / "runs.db")
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.runs()


# -- processes -------------------------------------------------------------

# Children load leaky/store.py by path: it is standard library only, and this keeps
# torch (and the rest of leaky) out of their start-up.
CHILD_PRELUDE = f"""
import importlib.util
_spec = importlib.util.spec_from_file_location("leaky_store", {str(Path(store_mod.__file__))!r})
_store = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_store)
Store = _store.Store
"""


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines(stream) -> queue.Queue:
    """Lines of `stream` as they come, read in a thread so the test can time out."""
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


WRITER_UNTIL_KILLED = """
    import sys
    store = Store(sys.argv[1])
    run = store.start_run("train.py", [], torch_version="t", leaky_version="l", device="cpu", git_commit=None)
    print("run", run, flush=True)
    for batch in range(10_000):
        store.add_steps(run, [(batch * 10 + i, 1.0 / (batch + 1), 0.5, False) for i in range(10)])
        print((batch + 1) * 10, flush=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_loses_nothing_committed(tmp_path):
    path = tmp_path / "runs.db"
    proc = _python(WRITER_UNTIL_KILLED, str(path))
    try:
        lines, committed, batches, run = _lines(proc.stdout), 0, 0, None
        while batches < 5:
            line = lines.get(timeout=CHILD_TIMEOUT_S)
            assert line is not None, proc.stderr.read()
            if line.startswith("run"):
                run = int(line.split()[1])
            else:
                committed, batches = int(line), batches + 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=CHILD_TIMEOUT_S)
        while (line := lines.get(timeout=CHILD_TIMEOUT_S)) is not None:   # printed before the kill
            committed = max(committed, int(line))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=CHILD_TIMEOUT_S)
        proc.stdout.close()
        proc.stderr.close()

    assert proc.returncode == -signal.SIGKILL
    with Store(path) as store:
        (got,) = store.runs()
        assert got["id"] == run and got["steps"] >= committed >= 50
        assert got["status"] == "running" and got["alive"] is False
        steps = store.steps(run)
        assert [s["step"] for s in steps] == list(range(len(steps)))


CONCURRENT_WRITER = """
    import sys, time
    path, name, go = sys.argv[1], sys.argv[2], float(sys.argv[3])
    time.sleep(max(0.0, go - time.time()))          # both start writing together
    with Store(path) as store:
        run = store.start_run(name, [], torch_version="t", leaky_version="l", device="cpu", git_commit=None)
        for step in range(200):
            store.add_steps(run, [(step, float(step), 1.0, False)])
            if step % 20 == 0:
                store.record_finding(run, {"code": "LK1", "name": "x", "severity": "info", "module": None,
                                           "op": None, "source": None, "step": step, "message": "m",
                                           "evidence": {}, "fix": "f"}, step)
        store.end_run(run, "finished")
    print("done", run, flush=True)
"""


def test_two_concurrent_writers(tmp_path):
    path = tmp_path / "runs.db"          # not created yet: both also race to create the schema
    go = time.time() + 1.0
    procs = [_python(CONCURRENT_WRITER, str(path), name, str(go)) for name in ("a.py", "b.py")]
    try:
        outs = [p.communicate(timeout=CHILD_TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.startswith("done")
    with Store(path) as store:
        runs = store.runs()
        assert sorted(r["script"] for r in runs) == ["a.py", "b.py"]
        assert all(r["steps"] == 200 and r["status"] == "finished" and r["findings"] == 1 for r in runs)
        total = store.conn.execute("SELECT count(*) FROM steps").fetchone()[0]
        assert total == 400
        assert [s["step"] for s in store.steps(runs[0]["id"])] == list(range(200))
