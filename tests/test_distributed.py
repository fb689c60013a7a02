"""torchrun + DDP with the gloo backend on CPU: reductions across ranks, rank-0 output."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

SCRIPT = """
import torch, torch.distributed as dist, torch.nn as nn
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x, y):
        h = self.act(self.fc1(x))
        return torch.sqrt(((self.fc2(h) - y) ** 2).sum(-1)).mean()   # DISTANCE

model = Net()
with torch.no_grad():
    model.fc1.weight.abs_()          # units fire on positive inputs only
    model.fc1.bias.zero_()
model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
gen = torch.Generator().manual_seed(100 + rank)
for step in range(12):
    x = torch.rand(32, 8, generator=gen) * (1 if rank == 1 else -1)   # rank 0: every unit silent
    y = torch.randn(32, 1, generator=gen)
    if rank == 1 and step == 5:
        with torch.no_grad():
            y[:4] = model.module.fc2(model.module.act(model.module.fc1(x[:4])))   # distance exactly 0
    loss = model(x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"rank {rank} step {step}", flush=True)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ddp_reduces_across_ranks_and_only_rank_zero_reports(tmp_path):
    pytest.importorskip("torch.distributed")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    report = tmp_path / "out.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={_free_port()}", "-m", "leaky", "audit", "--json", str(report),
                           str(script)], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert report.exists(), done.stderr[-3000:]
    data = json.loads(report.read_text())
    codes = [f["code"] for f in data["findings"]]
    # rank 0's own units never fire, rank 1's do: after the reduction no unit is dead
    assert "LK102" not in codes
    # the NaN came from rank 1's data; rank 0 reports it with its rank and line
    (origin,) = [f for f in data["findings"] if f["code"] == "LK107"]
    line = textwrap.dedent(SCRIPT).splitlines().index(next(
        l for l in textwrap.dedent(SCRIPT).splitlines() if "# DISTANCE" in l)) + 1
    assert origin["evidence"]["rank"] == 1 and origin["step"] == 5 and origin["source"]["line"] == line
    # only rank 0 printed a report
    assert done.stdout.count("steps observed") == 1
    assert "rank 1 step 11" in done.stdout
