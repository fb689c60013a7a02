"""A script that trains in processes it starts itself (pytorch/examples mnist_hogwild:
torch.multiprocessing Process(target=train) over a model in shared memory). leaky observes
its own process only: it must say so, not ask whether the script calls backward(), and a
child forked while leaky observes must train as it would without leaky."""
from __future__ import annotations

import sqlite3
import sys

import pytest

from leaky.cli import main

HOGWILD = """
import torch, torch.nn as nn, torch.nn.functional as F
import torch.multiprocessing as mp


def train(model, steps):
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        x = torch.randn(32, 8)
        loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("child trained", step + 1, "steps", flush=True)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    model.share_memory()
    workers = [mp.get_context("fork").Process(target=train, args=(model, 30)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print("exit codes", [worker.exitcode for worker in workers])
"""

FORWARD_ONLY = """
import torch
model = torch.nn.Linear(4, 2)
with torch.no_grad():
    print(model(torch.randn(3, 4)).shape)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork start method")
def test_training_in_forked_children_is_said_and_left_to_finish(tmp_path, capfd):
    path = tmp_path / "hogwild.py"
    path.write_text(HOGWILD)
    status = main(["audit", "--steps", "20", str(path)])
    out, err = capfd.readouterr()
    assert status == 2
    # each child ran its 30 steps: the parent's 20-step limit stopped neither of them
    assert out.count("child trained 30 steps") == 2 and "exit codes [0, 0]" in out
    assert "child processes worked for" in err and "Does the script call loss.backward()" not in err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork start method")
def test_a_watch_stores_nothing_from_forked_children(tmp_path, capfd):
    """A watch's check passes ran in each forked child and wrote its steps and module rows
    (31 and 16) into the parent's store, from two processes at once."""
    path, store = tmp_path / "hogwild.py", tmp_path / "runs.db"
    path.write_text(HOGWILD)
    assert main(["watch", "--every", "1", "--store", str(store), str(path)]) == 2
    assert capfd.readouterr().out.count("child trained 30 steps") == 2
    with sqlite3.connect(store) as conn:
        rows = [conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                for table in ("steps", "module_stats", "findings")]
    assert rows == [0, 0, 0]


def test_a_script_without_backward_or_children_is_asked_about_backward(tmp_path, capfd):
    path = tmp_path / "forward.py"
    path.write_text(FORWARD_ONLY)
    assert main(["audit", str(path)]) == 2
    err = capfd.readouterr().err
    assert "Does the script call loss.backward()" in err and "child processes" not in err
