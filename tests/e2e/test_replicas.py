"""LK401 replicas-diverged and LK402 gradients-not-synced under torchrun: real ranks, gloo on CPU,
real DDP all-reduces (no mock). Each broken program is the idiom people write, and the finding
names the step, the parameters and the line; the healthy look-alike (accumulation with no_sync
used right, find_unused_parameters with a branch unused everywhere, a per-rank expert kept out of
DDP, a second model left unwrapped) is quiet. One launch per program: 6 at 2 ranks, 1 at 4."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.e2e.test_distributed import _free_port

COMMON = """
import contextlib, torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

gen = torch.Generator().manual_seed(100 + rank)   # each rank its own share of the data
def batch():
    return torch.randn(32, 8, generator=gen), torch.randn(32, 1, generator=gen)
"""

PROGRAMS = {
    # (1) the trainer builds the wrapper, then calls the module it wrapped
    "bypass": """
torch.manual_seed(0)
model = Net()
ddp = DDP(model)   # WRAP
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    x, y = batch()
    loss = ((model(x) - y) ** 2).mean()   # BYPASS
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    # (2) accumulation over 2 micro-steps whose no_sync covers the last one instead of the first
    "no_sync": """
torch.manual_seed(0)
model = DDP(Net())   # WRAP
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(12):
    x, y = batch()
    context = model.no_sync() if i % 2 == 1 else contextlib.nullcontext()   # off by one
    with context:
        (((model(x) - y) ** 2).mean() / 2).backward()   # FORWARD
    if i % 2 == 1:
        opt.step()
        opt.zero_grad()
""",
    # (3) each rank seeds its own init, and the wrapper is told not to broadcast rank 0's
    "init": """
torch.manual_seed(rank)
model = DDP(Net(), init_sync=False)   # WRAP
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    x, y = batch()
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    # (3') a new head put in after wrapping (find_unused_parameters=True silences DDP's error
    # about the old head's missing gradients): DDP still syncs the old head
    "replaced": """
torch.manual_seed(0)
model = Net()
ddp = DDP(model, find_unused_parameters=True)   # WRAP
model.fc2 = nn.Linear(16, 1)   # REPLACED
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(6):
    x, y = batch()
    loss = ((ddp(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    # (3'') a backbone frozen when the model is wrapped, unfrozen for fine-tuning from step 2
    "unfrozen": """
torch.manual_seed(0)
model = Net()
model.fc1.requires_grad_(False)
ddp = DDP(model)   # WRAP
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    if step == 2:
        model.fc1.requires_grad_(True)   # UNFREEZE
    x, y = batch()
    loss = ((ddp(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    # (3''') rank 0 resumes from a checkpoint after the wrapper broadcast the fresh weights
    "loaded": """
torch.manual_seed(0)
model = Net()
ddp = DDP(model)   # WRAP
if rank == 0:
    torch.save(Net().state_dict(), "warm.pt")   # an earlier run's weights
    model.load_state_dict(torch.load("warm.pt"))
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(6):
    x, y = batch()
    loss = ((ddp(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    # the healthy look-alikes, in one program, audited through the Python API: the wrapper is
    # built before the audit starts (noted at its first forward); rank 0 writes what was compared
    "healthy": """
import json, sys, leaky

class Mixed(Net):
    def __init__(self):
        super().__init__()
        self.unused = nn.Linear(16, 1)   # a branch no rank uses
        self.expert = nn.Linear(8, 1)    # a per-rank expert, kept out of DDP

    def forward(self, x):
        return super().forward(x) + self.expert(x)

torch.manual_seed(0)
model = Mixed()
torch.manual_seed(rank)
model.expert.reset_parameters()          # differs per rank by design
DDP._set_params_and_buffers_to_ignore_for_model(model, ["expert.weight", "expert.bias"])
ddp = DDP(model, find_unused_parameters=True)
side = nn.Linear(8, 1)                   # a second model, per rank, never wrapped
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
tp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))   # tensor parallel: each rank its shard
parallelize_module(tp, init_device_mesh("cpu", (dist.get_world_size(),)), {"0": ColwiseParallel(), "2": RowwiseParallel()})
shared = torch.Generator().manual_seed(7)   # the tensor-parallel part's input: the same on every rank
opt = torch.optim.SGD(list(ddp.parameters()) + list(side.parameters()) + list(tp.parameters()), lr=0.1,
                      foreach=False)   # plain tensors and DTensor shards in one optimizer
with leaky.audit(steps=6) as observed:
    for i in range(12):
        x, y = batch()
        last = i % 2 == 1
        with contextlib.nullcontext() if last else ddp.no_sync():   # sync on the last micro-step
            (((ddp(x) + side(x) - y) ** 2).mean() / 2 + tp(torch.randn(4, 8, generator=shared)).pow(2).mean()).backward()
        if last:
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            model(x)                     # an evaluation through the bare module: no bypass
if rank == 0:
    compared = observed.stats.derived["replicas"]["params"]
    with open(sys.argv[1], "w") as out:
        json.dump({"codes": [f.code for f in observed.report.findings], "steps": observed.stats.steps,
                   "compared": {row["name"]: [row["param_spread"], row["grad_spread"]] for row in compared},
                   "use": list(observed.stats.derived["replicas"]["use"].values())}, out)
""",
}
RANKS = {"loaded": 4}
API = {"healthy"}   # run by torchrun itself, audited with leaky.audit()


def _line(name: str, marker: str) -> int:
    lines = _script(name).splitlines()
    return next(i for i, line in enumerate(lines, 1) if f"# {marker}" in line)


def _script(name: str) -> str:
    return textwrap.dedent(COMMON) + PROGRAMS[name] + "dist.destroy_process_group()\n"


def _audit(tmp_path, name: str) -> dict:
    script = tmp_path / f"{name}.py"
    script.write_text(_script(name))
    report = tmp_path / f"{name}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    command = [str(script), str(report)] if name in API else ["-m", "leaky", "audit", "--json", str(report), str(script)]
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={RANKS.get(name, 2)}",
                           f"--master_port={_free_port()}", *command],
                          capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert report.exists(), done.stderr[-3000:]
    data = json.loads(report.read_text())
    if name not in API:
        assert data["run"]["internal_error"] is None
        # rank 0's status is torchrun's: the other ranks end 0 rather than stop rank 0 before it writes
        assert done.returncode == (1 if any(f["severity"] == "error" for f in data["findings"]) else 0)
    return data


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    pytest.importorskip("torch.distributed")
    tmp_path = tmp_path_factory.mktemp("replicas")
    return {name: _audit(tmp_path, name) for name in PROGRAMS}


def _one(data: dict, code: str) -> dict:
    found = [f for f in data["findings"] if f["code"] == code]
    assert len(found) == 1, [(f["code"], f["message"]) for f in data["findings"]]
    return found[0]


def _codes(data: dict) -> set[str]:
    return {f["code"] for f in data["findings"]}


def test_a_forward_around_the_wrapper_unsyncs_gradients_then_weights(reports):
    data = reports["bypass"]
    for code in ("LK402", "LK401"):
        found = _one(data, code)
        assert (found["severity"], found["step"], found["source"]["line"]) == ("error", 0, _line("bypass", "BYPASS"))
        assert found["evidence"]["cause"] == "bypassed" and len(found["evidence"]["params"]) == 4
        assert f"built at bypass.py:{_line('bypass', 'WRAP')}" in found["message"]
        assert found["evidence"]["ranks"] == [[0], [1]] and "ranks 0 and 1 differ" in found["message"]


def test_no_sync_left_on_for_the_last_micro_step(reports):
    data = reports["no_sync"]
    grads = _one(data, "LK402")
    assert grads["evidence"]["cause"] == "no_sync" and grads["step"] == 0
    assert grads["source"]["line"] == _line("no_sync", "FORWARD") and "(no_sync() in force)" in grads["message"]
    assert _one(data, "LK401")["step"] == 0   # the weights follow


def test_a_rank_seeded_init_never_broadcast(reports):
    data = reports["init"]
    found = _one(data, "LK401")
    assert (found["step"], found["evidence"]["cause"]) == (0, "init_not_broadcast")
    assert found["source"]["line"] == _line("init", "WRAP") and "init_sync=False" in found["message"]
    assert "LK402" not in _codes(data)   # DDP averaged the gradients: those are equal


def test_a_head_replaced_after_wrapping(reports):
    data = reports["replaced"]
    for code in ("LK402", "LK401"):
        found = _one(data, code)
        assert found["evidence"]["cause"] == "replaced" and found["step"] == 0
        assert sorted(found["evidence"]["params"]) == ["fc2.bias", "fc2.weight"]
        assert found["source"]["line"] == _line("replaced", "WRAP")
        assert found["evidence"]["compared"] == 4   # fc1 synced and equal, fc2 compared by name
        assert found["evidence"]["ranks"] == [[0], [1]]   # each rank stepped on its own data


def test_a_checkpoint_loaded_on_rank_0_after_wrapping_on_four_ranks(reports):
    data = reports["loaded"]
    found = _one(data, "LK401")
    assert (found["step"], found["evidence"]["cause"], found["source"]["line"]) == (0, "init_not_broadcast",
                                                                                   _line("loaded", "WRAP"))
    assert found["evidence"]["ranks"] == [[1, 2, 3], [0]] and "rank 0 differs from ranks 1, 2, 3" in found["message"]
    assert len(found["evidence"]["params"]) == 4 and "LK402" not in _codes(data)   # the gradients are averaged


def test_a_backbone_unfrozen_after_wrapping(reports):
    data = reports["unfrozen"]
    for code in ("LK402", "LK401"):
        found = _one(data, code)
        assert (found["step"], found["evidence"]["cause"]) == (2, "frozen_at_wrap")
        assert sorted(found["evidence"]["params"]) == ["fc1.bias", "fc1.weight"]
        assert found["source"]["line"] == _line("unfrozen", "WRAP") and "did not require grad when" in found["message"]


def test_the_healthy_look_alikes_are_quiet_and_were_compared(reports):
    data = reports["healthy"]
    assert data["steps"] == 6 and not {"LK401", "LK402"} & set(data["codes"]), data["codes"]
    # the synced parameters, the branch no rank uses among them, are compared and exactly equal;
    # the expert DDP ignores, the unwrapped model and the tensor-parallel shards are not compared at all
    assert data["compared"] == {name: [0.0, 0.0] for name in
                                ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "unused.weight", "unused.bias")}
    # each step: two forwards through the wrapper, the last one synced, no bypass (the bare
    # module's forward ran under no_grad)
    assert data["use"] == [[[2, True, 0]]] * 6
