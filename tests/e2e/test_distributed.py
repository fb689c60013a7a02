"""torchrun + DDP and FSDP2 with the gloo backend on CPU: reductions across ranks, rank-0 output."""
from __future__ import annotations

import json
import math
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

    def forward(self, x, y=None):
        out = self.fc2(self.act(self.fc1(x)))
        if y is None:
            return out
        return torch.sqrt(((out - y) ** 2).sum(-1)).mean()   # DISTANCE

model = Net()
with torch.no_grad():
    model.fc1.weight.abs_()          # units fire on positive inputs only
    model.fc1.bias.zero_()
if "{wrap}" == "ddp":
    model = nn.parallel.DistributedDataParallel(model)
else:
    from torch.distributed.fsdp import fully_shard
    fully_shard(model.fc1)
    fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
gen = torch.Generator().manual_seed(100 + rank)
for step in range(12):
    x = torch.rand(32, 8, generator=gen) * (1 if rank == 1 else -1)   # rank 0: every unit silent
    y = torch.randn(32, 1, generator=gen)
    if step == 5:
        with torch.no_grad():
            pred = model(x[:4])    # on every rank: under FSDP a forward is a collective
        if rank == 1:
            y[:4] = pred           # distance exactly 0
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


def _run(tmp_path, wrap: str) -> tuple[dict, subprocess.CompletedProcess]:
    script = tmp_path / f"train_{wrap}.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("{wrap}", wrap))
    report = tmp_path / f"out_{wrap}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={_free_port()}", "-m", "leaky", "audit", "--json", str(report),
                           str(script)], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert report.exists(), done.stderr[-3000:]
    return json.loads(report.read_text()), done


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("torch.distributed")
    tmp_path = tmp_path_factory.mktemp("distributed")
    return {wrap: _run(tmp_path, wrap) for wrap in ("ddp", "fsdp")}


@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_reduces_across_ranks_and_only_rank_zero_reports(runs, wrap):
    data, done = runs[wrap]
    assert data["run"]["internal_error"] is None
    codes = [f["code"] for f in data["findings"]]
    # DDP's replicas stay bitwise equal; FSDP2's shards are no replicas (issue 32)
    assert "LK401" not in codes and "LK402" not in codes
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


def test_fsdp_norms_are_those_of_the_full_gradient(runs):
    """FSDP2 shards each parameter and its gradient across the ranks; DDP keeps whole copies.
    Both average the same per-rank gradients, so every norm leaky reports must agree."""
    ddp, fsdp = runs["ddp"][0], runs["fsdp"][0]
    assert ddp["run"]["losses"] == fsdp["run"]["losses"]
    for a, b in zip(ddp["parameters"], fsdp["parameters"]):
        assert a["name"] == b["name"] and a["shape"] == b["shape"]
        for key in ("grad_norm", "update_ratio", "update_ratio_max"):
            if isinstance(a[key], float) and math.isfinite(a[key]):
                assert b[key] == pytest.approx(a[key], rel=1e-4), (a["name"], key)
            else:
                assert b[key] == a[key], (a["name"], key)   # both None, or the same "nan"/"inf"
    assert len(ddp["series"]) == len(fsdp["series"]) == 12
    for a, b in zip(ddp["series"], fsdp["series"]):
        if isinstance(a["grad_norm"], float) and math.isfinite(a["grad_norm"]):
            assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4), a["step"]
        else:
            assert b["grad_norm"] == a["grad_norm"], a["step"]
