"""LK403 norm-per-shard and the ranks' mean loss under torchrun: real ranks, gloo on CPU, real
FSDP1, FSDP2 and DDP collectives (no mock). The broken programs clip by a norm of this rank's
shard (torch.nn.utils.clip_grad_norm_ on an FSDP1 model's flat parameters, a norm of
p.grad.to_local() handed to clip_grads_with_norm_ under FSDP2); their healthy look-alikes clip
by the global norm (FSDP1's own model.clip_grad_norm_, clip_grad_norm_ on FSDP2's DTensor
gradients, DDP's whole averaged gradients). Six launches: four at 2 ranks, two at 4 (the FSDP1
program with leaky and without: its losses bit for bit); one of them a watch."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import leaky
from tests.e2e.test_distributed import _free_port

SCRIPT = """
import sys, torch, torch.distributed as dist, torch.nn as nn
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
mode = sys.argv[1]
if mode.startswith("fsdp1"):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    model = FSDP(model, device_id=torch.device("cpu"))
elif mode.startswith("fsdp2"):
    from torch.distributed.fsdp import fully_shard
    fully_shard(model[0])
    fully_shard(model)
else:
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
gen = torch.Generator().manual_seed(100 + rank)
for step in range(6):
    x = torch.randn(16, 8, generator=gen)
    y = torch.randn(16, 1, generator=gen) * (10.0 if rank == 1 else 1.0)   # rank 1's data: another scale
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    if mode == "fsdp1-bad":
        truth = model.clip_grad_norm_(float("inf"))                     # the global norm, grads unchanged
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)   # CLIP
        print(f"rank {rank} norm {float(norm):.8f} truth {float(truth):.8f}", flush=True)
    elif mode == "fsdp1-good":
        model.clip_grad_norm_(0.5)                                       # CLIP
    elif mode == "fsdp2-bad":
        params = list(model.parameters())
        norm = torch.nn.utils.get_total_norm([p.grad.to_local() for p in params])   # NORM
        torch.nn.utils.clip_grads_with_norm_(params, 0.5, norm)                   # CLIP
    else:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)          # CLIP
    print(f"rank {rank} step {step} loss {loss.item():.8f} bits {loss.item().hex()}", flush=True)
    opt.step()
dist.destroy_process_group()
"""
def _line(mode: str, tag: str) -> int:
    """The script's line with `# tag` in the branch of `mode`."""
    lines = textwrap.dedent(SCRIPT).splitlines()
    start = next(i for i, l in enumerate(lines) if f'mode == "{mode}"' in l)
    return next(i for i, l in enumerate(lines[start:], start + 1) if f"# {tag}" in l)


def _launch(tmp_path, mode: str, ranks: int = 2, command: tuple = ("audit",)):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    report = tmp_path / f"out_{mode}_{ranks}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                           f"--master_port={_free_port()}", "-m", "leaky", *command, "--json", str(report),
                           str(script), mode], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert report.exists(), done.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["run"]["internal_error"] is None
    return data, done.stdout


def _plain(tmp_path, mode: str, ranks: int) -> str:
    """The script's own output under torchrun, without leaky."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                           f"--master_port={_free_port()}", str(tmp_path / "train.py"), mode],
                          capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _bits(out: str) -> dict:
    found = re.findall(r"rank (\d) step (\d) loss \S+ bits (0x[0-9a-fp.+-]+)", out)
    return {(int(r), int(s)): bits for r, s, bits in found}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("torch.distributed")
    tmp_path = tmp_path_factory.mktemp("shards")
    return {"fsdp1-bad": _launch(tmp_path, "fsdp1-bad", ranks=4),
            "fsdp1-plain": _plain(tmp_path, "fsdp1-bad", ranks=4),
            "fsdp1-good": _launch(tmp_path, "fsdp1-good"),
            "fsdp2-bad": _launch(tmp_path, "fsdp2-bad"),
            "fsdp2-good": _launch(tmp_path, "fsdp2-good"),
            # a watch copies its series in batches: the last ones when the script tears its group down
            "ddp": _launch(tmp_path, "ddp", command=("watch", "--every", "2"))}


def _lk403(data) -> list[dict]:
    return [f for f in data["findings"] if f["code"] == "LK403"]


def test_fsdp1_clip_grad_norm_on_the_flat_shards_is_the_ratio_of_the_scripts_own_norms(runs):
    data, out = runs["fsdp1-bad"]
    (finding,) = _lk403(data)
    norm, truth = map(float, re.search(r"rank 0 norm (\d+\.\d{8}) truth (\d+\.\d{8})", out).groups())
    evidence = finding["evidence"]
    assert finding["severity"] == "error" and finding["source"]["line"] == _line("fsdp1-bad", "CLIP")
    assert evidence["ranks"] == 4 and evidence["covered"] == ["FSDP1 flat parameters"]
    assert evidence["norm"] == pytest.approx(norm, rel=1e-6)
    assert evidence["global_norm"] == pytest.approx(truth, rel=1e-5)   # FSDP1's own all-reduced norm
    assert evidence["ratio"] == pytest.approx(norm / truth, rel=1e-5) and evidence["ratio"] < 0.99
    assert "model.clip_grad_norm_(max_norm)" in finding["fix"]
    assert "over the 4 ranks" in finding["message"] and "1/√4 = 0.500" in finding["message"]
    assert finding["evidence"]["calls"] == finding["evidence"]["compared"] == 6   # every step: the run goes on


def test_fsdp1_trains_bit_for_bit_as_without_leaky(runs):
    """The batch-mixing probe leaves FSDP1 alone: its extra forward and backward through the
    wrapper left the flat parameter's views stale, and the script's next forward failed."""
    (data, out), plain = runs["fsdp1-bad"], runs["fsdp1-plain"]
    assert len(_bits(plain)) == 4 * 6 and _bits(out) == _bits(plain)
    assert not [f for f in data["findings"] if f["code"] == "LK108"]   # the probe's pass was what cut it


def test_fsdp2_a_norm_of_local_shards_handed_to_the_clip_is_one_finding_at_the_clip(runs):
    data, _ = runs["fsdp2-bad"]
    (finding,) = _lk403(data)
    assert finding["source"]["line"] == _line("fsdp2-bad", "CLIP") and finding["step"] == 0
    assert finding["evidence"]["call"] == "clip_grads_with_norm_" and finding["evidence"]["calls"] == 6
    assert f"get_total_norm at train.py:{_line('fsdp2-bad', 'NORM')}" in finding["message"]
    assert finding["evidence"]["ratio"] < 0.99 and "DTensor gradients themselves" in finding["fix"]


@pytest.mark.parametrize("mode", ["fsdp1-good", "fsdp2-good", "ddp"])
def test_a_clip_by_the_global_norm_is_quiet(runs, mode):
    data, out = runs[mode]
    assert _lk403(data) == [] and "rank 1 step 0" in out


def test_fsdp1_gradient_norms_are_those_of_the_full_gradient(runs):
    """FSDP1 clipping by its own global norm trains as DDP clipping whole averaged gradients:
    the every-step gradient norm sums the flat shards' squares over the ranks (not rank 0's
    shard), and the losses are the same ranks' means."""
    fsdp1, ddp = runs["fsdp1-good"][0]["series"], runs["ddp"][0]["series"]
    assert len(fsdp1) == len(ddp) == 6
    for a, b in zip(fsdp1, ddp):
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4), a["step"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4), a["step"]


@pytest.mark.parametrize("mode", ["ddp", "fsdp2-good"])
def test_the_loss_curve_is_the_mean_of_the_ranks_losses_and_the_report_says_so(runs, mode):
    data, out = runs[mode]
    printed = {(int(r), int(s)): float(v) for r, s, v in re.findall(r"rank (\d) step (\d) loss (\d+\.\d{8})", out)}
    assert printed[1, 0] > 10 * printed[0, 0]   # the ranks' losses differ
    losses = [row["loss"] for row in data["series"]]
    assert losses == pytest.approx([(printed[0, s] + printed[1, s]) / 2 for s in range(6)], rel=1e-6)
    assert "the loss curve is the mean of the 2 ranks' losses (LK204, LK205)." in data["run"]["notes"]


def test_a_single_process_clip_is_not_compared_and_has_no_ranks_note():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    originals = torch.nn.utils.clip_grad_norm_, torch.distributed.destroy_process_group
    with leaky.audit(steps=3) as observed:
        assert (torch.nn.utils.clip_grad_norm_, torch.distributed.destroy_process_group) != originals
        for _ in range(3):
            loss = model(torch.randn(16, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
    assert observed.stats.derived["clip_norms"] == () and observed.report.by_code("LK403") == []
    assert not any("ranks' losses" in note or "rank 0's" in note for note in observed.report.run["notes"])
    assert (torch.nn.utils.clip_grad_norm_, torch.distributed.destroy_process_group) == originals   # restored
