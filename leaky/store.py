"""The run store: every `leaky watch` run kept in one embedded SQLite file.

    from leaky.store import Store, git_commit, resolve_run

    with Store("leaky-runs.db") as store:
        run = store.start_run("train.py", ["--epochs", "3"], torch_version=torch.__version__,
                              leaky_version=leaky.__version__, device="cuda:0",
                              git_commit=git_commit("train.py"))
        store.add_steps(run, [(0, 2.31, 0.8, False), (1, float("nan"), None, True)])
        store.add_module_stats(run, 1, [{"module": "fc1", "grad_norm": 0.4, "dead_share": 0.1}])
        store.record_finding(run, finding.to_dict(), step=1)   # True the first time it is seen
        store.save_report(run, report.to_dict())            # the final report, kept whole
        store.end_run(run, "finished")

    with Store("leaky-runs.db") as store:
        store.runs()                         # newest first, with counts and `alive`
        store.findings(resolve_run(store, "latest"))
        store.report(resolve_run(store, "latest"))   # None for a run with no saved report

Every add_* / record_finding / save_report / end_run call is one committed transaction, so a
process killed with SIGKILL loses at most the call in flight. The file is in WAL
mode with a busy timeout, so several processes may write to it at once; use one
Store per thread or process. Non-finite floats are stored as NULL and read back
as None; a step's `nonfinite` flag says that its loss or gradient norm was
nan/inf. Schema, versioning and guarantees: docs/store.md.
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import time
from contextlib import contextmanager
from typing import Any, Iterator

DEFAULT_PATH = "./leaky-runs.db"
BUSY_TIMEOUT_S = 10.0
STATUSES = ("running", "finished", "failed", "stopped")
STAT_KEYS = ("grad_norm", "gain", "dead_share", "saturated_share", "update_ratio")

# Key sentinels for the findings primary key (SQLite treats NULLs in a key as distinct).
# A module name never equals "." (torch rejects dotted child names; the root is ""),
# so "." stands for "no module" while "" stays the root module.
NO_MODULE, NO_TEXT, NO_LINE = ".", "", -1

# (version, statements). Append new versions; never edit a released one.
MIGRATIONS: list[tuple[int, list[str]]] = [
    (1, [
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY, script TEXT NOT NULL, argv TEXT NOT NULL DEFAULT '[]',
            started REAL NOT NULL, ended REAL, status TEXT NOT NULL DEFAULT 'running',
            torch_version TEXT, leaky_version TEXT, device TEXT, git_commit TEXT,
            error TEXT, pid INTEGER)""",
        """CREATE TABLE steps (
            run_id INTEGER NOT NULL REFERENCES runs(id), step INTEGER NOT NULL,
            loss REAL, grad_norm REAL, nonfinite INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (run_id, step))""",
        """CREATE TABLE module_stats (
            run_id INTEGER NOT NULL REFERENCES runs(id), step INTEGER NOT NULL,
            module TEXT NOT NULL, grad_norm REAL, gain REAL, dead_share REAL,
            saturated_share REAL, update_ratio REAL,
            PRIMARY KEY (run_id, step, module))""",
        "CREATE INDEX module_stats_by_module ON module_stats (run_id, module, step)",
        """CREATE TABLE findings (
            run_id INTEGER NOT NULL REFERENCES runs(id), code TEXT NOT NULL, name TEXT,
            severity TEXT, module TEXT NOT NULL, op TEXT NOT NULL, file TEXT NOT NULL,
            line INTEGER NOT NULL, first_step INTEGER, last_step INTEGER,
            message TEXT, fix TEXT, evidence TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (run_id, code, module, op, file, line))""",
    ]),
    # the line to change (report-v1's optional `cause`), as JSON {"file", "line", "what"}
    (2, ["ALTER TABLE findings ADD COLUMN cause TEXT"]),
    # each run's final report (report-v1 JSON), so that `leaky diff` can compare stored runs
    (3, ["CREATE TABLE reports (run_id INTEGER PRIMARY KEY REFERENCES runs(id), json TEXT NOT NULL)"]),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


class StoreError(Exception):
    """The run store cannot be opened, read or written; the message is one line."""


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def _finite(x: Any) -> float | None:
    """A float for SQLite, or None for missing and non-finite values."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the schema to SCHEMA_VERSION in one transaction, or refuse a newer one."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"{path} was written by a newer leaky (schema {version}, "
                             f"this leaky knows {SCHEMA_VERSION}); upgrade leaky")
        for target, statements in MIGRATIONS:
            if target > version:
                for sql in statements:
                    conn.execute(sql)
                conn.execute(f"PRAGMA user_version = {int(target)}")
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:       # SQLite may already have rolled back (e.g. disk full)
        conn.execute("ROLLBACK")


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL. The switch needs an exclusive lock and SQLite does not wait for it
    (two new connections would deadlock), so retry here until the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _connect(path: str) -> sqlite3.Connection:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise StoreError(f"cannot create run store {path}: the directory {folder} does not exist")
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        _enable_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        _migrate(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


class Store:
    """One connection to a run store file; see the module docstring."""

    def __init__(self, path: str | os.PathLike = DEFAULT_PATH):
        self.path = os.fspath(path)
        try:
            self._conn: sqlite3.Connection | None = _connect(self.path)
        except sqlite3.DatabaseError as err:
            kind = "not a SQLite database" if "not a database" in str(err) else _one_line(err)
            raise StoreError(f"cannot open run store {self.path}: {kind}") from None
        except sqlite3.Error as err:
            raise StoreError(f"cannot open run store {self.path}: {_one_line(err)}") from None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- plumbing -----------------------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"run store {self.path} is closed")
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One committed transaction; takes the write lock up front (waits up to the busy timeout)."""
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise StoreError(f"cannot write run store {self.path}: {_one_line(err)}") from None
        try:
            yield conn
            conn.execute("COMMIT")
        except sqlite3.Error as err:
            _rollback(conn)
            raise StoreError(f"cannot write run store {self.path}: {_one_line(err)}") from None
        except BaseException:
            _rollback(conn)
            raise

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as err:
            raise StoreError(f"cannot read run store {self.path}: {_one_line(err)}") from None

    # -- writing --------------------------------------------------------------
    def start_run(self, script: str, argv: list[str], *, torch_version: str, leaky_version: str,
                  device: str, git_commit: str | None) -> int:
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO runs (script, argv, started, status, torch_version, leaky_version,"
                " device, git_commit, pid) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                (script, json.dumps(list(argv)), time.time(), torch_version, leaky_version,
                 device, git_commit, os.getpid()))
            return int(cur.lastrowid)

    def add_steps(self, run_id: int, rows: list[tuple[int, float | None, float | None, bool]]) -> None:
        """One batch of (step, loss, grad_norm, nonfinite); a step written twice keeps the last."""
        values = []
        for step, loss, grad_norm, nonfinite in rows:
            lo, gn = _finite(loss), _finite(grad_norm)
            bad = bool(nonfinite) or (loss is not None and lo is None) or (grad_norm is not None and gn is None)
            values.append((run_id, int(step), lo, gn, int(bad)))
        with self._write() as conn:
            conn.executemany("INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, ?)", values)

    def add_module_stats(self, run_id: int, step: int, rows: list[dict]) -> None:
        values = [(run_id, int(step), row["module"], *(_finite(row.get(k)) for k in STAT_KEYS))
                  for row in rows]
        with self._write() as conn:
            conn.executemany("INSERT OR REPLACE INTO module_stats VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values)

    def record_finding(self, run_id: int, finding: dict, step: int | None) -> bool:
        """Insert or update one finding location; True when it is new for this run."""
        source = finding.get("source") or {}
        module = finding.get("module")
        key = (run_id, finding["code"], NO_MODULE if module is None else module,
               finding.get("op") or NO_TEXT, source.get("file") or NO_TEXT,
               NO_LINE if source.get("line") is None else int(source["line"]))
        step = finding.get("step") if step is None else step
        cause = finding.get("cause")
        # NOTE: the fix too: a finding seen again may say something else (LK202's "lower the
        # rate" becomes "nothing to change while the loss keeps falling"), and `leaky show`
        # must give the fix the run's last lines give
        body = (finding.get("severity"), finding.get("message"), finding.get("fix"),
                json.dumps(finding.get("evidence") or {}, default=str),
                None if not cause else json.dumps(cause, default=str))
        with self._write() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO findings (run_id, code, module, op, file, line, name,"
                " first_step, last_step, severity, message, fix, evidence, cause)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*key, finding.get("name"), step, step, *body))
            if cur.rowcount == 1:
                return True
            conn.execute(
                "UPDATE findings SET severity = ?, message = ?, fix = ?, evidence = ?, cause = ?,"
                " last_step = coalesce(?, last_step), first_step = coalesce(first_step, ?)"
                " WHERE run_id = ? AND code = ? AND module = ? AND op = ? AND file = ? AND line = ?",
                (*body, step, step, *key))
            return False

    def save_report(self, run_id: int, report: dict) -> None:
        """Keep the run's final report (`Report.to_dict()`); saved again, the last one is kept."""
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO reports (run_id, json) VALUES (?, ?)",
                         (run_id, json.dumps(report, default=str)))

    def end_run(self, run_id: int, status: str, error: str | None = None) -> None:
        if status not in STATUSES:
            raise StoreError(f"unknown run status {status!r}; expected one of {', '.join(STATUSES)}")
        with self._write() as conn:
            conn.execute("UPDATE runs SET status = ?, ended = ?, error = ? WHERE id = ?",
                         (status, time.time(), error, run_id))

    # -- reading --------------------------------------------------------------
    _RUNS_SQL = """
        SELECT r.*,
          (SELECT count(*) FROM steps s WHERE s.run_id = r.id) AS steps,
          (SELECT count(*) FROM findings f WHERE f.run_id = r.id) AS findings,
          (SELECT count(*) FROM findings f WHERE f.run_id = r.id AND f.severity = 'error') AS errors,
          (SELECT loss FROM steps s WHERE s.run_id = r.id ORDER BY step DESC LIMIT 1) AS last_loss
        FROM runs r"""

    def runs(self) -> list[dict]:
        """Every run, newest first, with step/finding/error counts, last_loss and `alive`."""
        return [_run_dict(row) for row in self._read(self._RUNS_SQL + " ORDER BY r.id DESC")]

    def run(self, run_id: int) -> dict:
        rows = self._read(self._RUNS_SQL + " WHERE r.id = ?", (run_id,))
        if not rows:
            raise StoreError(f"no run {run_id} in {self.path}")
        return _run_dict(rows[0])

    def steps(self, run_id: int) -> list[dict]:
        rows = self._read("SELECT step, loss, grad_norm, nonfinite FROM steps"
                          " WHERE run_id = ? ORDER BY step", (run_id,))
        return [{**dict(r), "nonfinite": bool(r["nonfinite"])} for r in rows]

    def module_stats(self, run_id: int) -> list[dict]:
        rows = self._read("SELECT step, module, grad_norm, gain, dead_share, saturated_share,"
                          " update_ratio FROM module_stats WHERE run_id = ? ORDER BY step, module",
                          (run_id,))
        return [dict(r) for r in rows]

    def report(self, run_id: int) -> dict | None:
        """The run's final report as saved, or None (a run still going, or stored before version 3)."""
        rows = self._read("SELECT json FROM reports WHERE run_id = ?", (run_id,))
        return json.loads(rows[0]["json"]) if rows else None

    def findings(self, run_id: int) -> list[dict]:
        """Ordered by first_step (unknown last), then severity (error first), then code."""
        rows = self._read(
            "SELECT * FROM findings WHERE run_id = ? ORDER BY first_step IS NULL, first_step,"
            " CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, code, module",
            (run_id,))
        return [_finding_dict(r) for r in rows]


def _pid_alive(pid: int | None) -> bool:
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:       # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def _run_dict(row: sqlite3.Row) -> dict:
    run = dict(row)
    run["argv"] = json.loads(run["argv"] or "[]")
    run["alive"] = run["status"] == "running" and _pid_alive(run["pid"])
    return run


def _finding_dict(row: sqlite3.Row) -> dict:
    f = dict(row)
    module, op, file, line = f.pop("module"), f.pop("op"), f.pop("file"), f.pop("line")
    f["module"] = None if module == NO_MODULE else module
    f["op"] = op or None
    f["source"] = None if not file else {"file": file, "line": None if line == NO_LINE else line}
    f["evidence"] = json.loads(f["evidence"] or "{}")
    cause = f.pop("cause", None)
    if cause:
        f["cause"] = json.loads(cause)
    return f


def git_commit(path: str) -> str | None:
    """HEAD of the git repository holding `path` (a file or directory); None if there is none."""
    where = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


def resolve_run(store: Store, key: str) -> int:
    """'latest' or 'last' -> the newest run's id; an integer string -> that run's id."""
    key = str(key).strip()
    if key.lower() in ("latest", "last"):
        rows = store._read("SELECT max(id) AS id FROM runs")
        if rows[0]["id"] is None:
            raise StoreError(f"no runs in {store.path}")
        return int(rows[0]["id"])
    try:
        run_id = int(key)
    except ValueError:
        raise StoreError(f"not a run: {key!r} (use a run id, 'latest' or 'last')") from None
    return int(store.run(run_id)["id"])
