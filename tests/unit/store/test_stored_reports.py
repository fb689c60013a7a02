"""Each stored run keeps its final report (schema version 3, issue 33): `leaky diff` compares
stored runs by their reports."""
from __future__ import annotations

import json
import sqlite3

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.store import MIGRATIONS, Store


def test_a_watched_run_keeps_its_final_report(tmp_path):
    path = tmp_path / "runs.db"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with leaky.watch(every=2, store=path) as run:
        for _ in range(6):
            loss = F.mse_loss(model(torch.randn(32, 8)), torch.randn(32, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    with Store(path) as store:
        stored = store.report(run.run_id)
    assert stored == json.loads(run.report.to_json())
    assert stored["ops"] and stored["config"]["optimizers"][0]["kind"] == "SGD"
    assert [row["step"] for row in stored["series"]] == list(range(6))


def test_a_version_2_store_migrates_and_its_old_runs_have_no_report(tmp_path):
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path)
    for version, statements in MIGRATIONS:
        if version <= 2:
            for sql in statements:
                conn.execute(sql)
    conn.execute("PRAGMA user_version = 2")
    conn.execute("INSERT INTO runs (id, script, argv, started, status) VALUES (41, 'old.py', '[]', 1.0, 'finished')")
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.report(41) is None
        store.save_report(41, {"schema": "leaky/report-v1", "ops": [], "loss": float("nan")})
        store.save_report(41, {"schema": "leaky/report-v1", "ops": [{"site": 0}]})   # saved again: the last is kept
        assert store.report(41) == {"schema": "leaky/report-v1", "ops": [{"site": 0}]}
        assert store.run(41)["script"] == "old.py"
