"""record/instruments/replicas.py in one process: the DDP patches and the module hook are gone
after an audit, also when the script raises, and observing a DDP run changes no loss (a gloo
group of one rank: real DDP, nothing to compare); the fold of the ranks' spreads on hand-made
max/min tensors (the runs of several ranks are tests/e2e/test_replicas.py)."""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import leaky
from leaky.record.instruments.replicas import Row, Segment, _fold, _norms
from tests.conftest import no_leaky_left


@pytest.fixture
def one_rank(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _train(audited: bool, raise_at: int | None = None) -> tuple[list[float], nn.Module]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    losses = []
    with leaky.audit(steps=4) if audited else contextlib.nullcontext():
        ddp = DDP(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(4):
            x, y = torch.randn(16, 6), torch.randn(16, 1)
            loss = ((ddp(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if step == raise_at:
                raise RuntimeError("the script fails")
    return losses, model


def test_observing_ddp_changes_no_loss_and_leaves_nothing(one_rank):
    plain, _ = _train(audited=False)
    observed, model = _train(audited=True)
    assert observed == plain   # bit for bit
    assert no_leaky_left() == [] and not model._forward_pre_hooks


def test_the_patches_and_the_hook_go_when_the_script_raises(one_rank):
    with pytest.raises(RuntimeError, match="the script fails"):
        _train(audited=True, raise_at=1)
    assert no_leaky_left() == []


def test_norms_are_float64_l2_with_minus_one_for_no_gradient():
    a, b = nn.Parameter(torch.tensor([3.0, 4.0])), nn.Parameter(torch.tensor([1.0]))
    a.grad = torch.tensor([0.0, 2.0])
    assert _norms([a, b]).tolist() == [[5.0, 2.0], [1.0, -1.0]]


def test_fold_keeps_the_first_step_past_tolerance_and_the_largest_spread():
    segment = Segment((Row(0, "fc.weight", "synced"), Row(0, "fc.bias", "synced")), start=0)
    equal = torch.tensor([[[2.0, 1.0], [3.0, -1.0]], [[2.0, 1.0], [3.0, -1.0]]], dtype=torch.float64)
    _fold(segment, 0, equal, 1e-6)
    assert segment.first.tolist() == [[-1, -1], [-1, -1]] and segment.worst.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    # step 1: fc.weight's weights 1% apart; fc.bias has a gradient on one rank only
    apart = torch.tensor([[[2.0, 1.0], [3.0, 0.5]], [[1.98, 1.0], [3.0, -1.0]]], dtype=torch.float64)
    _fold(segment, 1, apart, 1e-6)
    # step 2: a spread below the tolerance (rounding) moves nothing
    _fold(segment, 2, torch.tensor([[[2.0, 1.0], [3.0, -1.0]], [[2.0 - 1e-9, 1.0], [3.0, -1.0]]],
                                   dtype=torch.float64), 1e-6)
    assert segment.first.tolist() == [[1, -1], [-1, 1]]
    assert segment.worst[0, 0].item() == pytest.approx(0.01) and segment.worst[1, 1].item() == float("inf")
    assert segment.at_first[0].tolist() == [2.0, 1.98, 0.0, 0.0] and segment.missing.tolist() == [0, 1]
    assert segment.steps == 3
