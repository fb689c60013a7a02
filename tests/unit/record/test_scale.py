"""Bounded resources: leaky's own state grows with the program's op sites, never with steps.

Two large-but-cheap programs: a model with 10,000 modules (one tanh each, on a 2x4 batch)
and a hand-written recurrence over 10,000 time steps (hidden 4, batch 2). The per-step
device values and autograd hooks must be released after each step and after the block;
the site table, the per-site accumulators and the profiles must not grow with steps.
"""
from __future__ import annotations

import math
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from tests.conftest import no_leaky_left

N_MODULES = 10_000
TIME_STEPS = 10_000


def _train(model, opt, x, y, steps: int) -> leaky.Audit:
    with leaky.audit() as audit:
        for _ in range(steps):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    return audit


def _assert_released(audit: leaky.Audit) -> None:
    recorder = audit.recorder
    assert recorder.buffer.records == []
    assert recorder.buffer.values == []
    assert recorder.buffer.forward_flags == []
    assert recorder.buffer.loss is None and recorder.buffer.carried == {} and recorder.buffer.series == []
    assert recorder.buffer.params is None and recorder.buffer.updates is None
    assert len(recorder.grads.handles) == 0
    assert no_leaky_left() == []
    assert recorder.error is None


# -- 10,000 modules --------------------------------------------------------------------------
class Chain(nn.Module):
    """Linear -> 9,997 Tanh modules -> Linear: 10,000 submodules (the Sequential counts)."""

    def __init__(self, tanhs: int):
        super().__init__()
        self.inp = nn.Linear(4, 4)
        self.body = nn.Sequential(*[nn.Tanh() for _ in range(tanhs)])
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        return self.out(self.body(self.inp(x)))


def test_ten_thousand_modules_keep_state_per_site_not_per_step():
    tanhs = N_MODULES - 3
    model = Chain(tanhs)
    assert sum(1 for _ in model.modules()) - 1 == N_MODULES
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(2, 4), torch.randint(0, 3, (2,))

    two = _train(model, opt, x, y, steps=2)
    _assert_released(two)
    four = _train(model, opt, x, y, steps=4)
    _assert_released(four)
    assert (two.stats.steps, four.stats.steps) == (2, 4)

    for audit in (two, four):
        sites = audit.recorder.sites.sites
        per_module = Counter(site.module_key for site in sites if site.module_key is not None)
        by_op = Counter(site.op for site in sites)
        # one site per op call site: each Tanh module one, each Linear one, the loss outside any module
        assert by_op["tanh"] == tanhs
        assert by_op["linear"] == 2
        assert max(per_module.values()) == 1
        outside = [site for site in sites if site.module_key is None]
        assert 1 <= len(outside) <= 4, [(s.op, s.node) for s in outside]
        assert len(audit.recorder.builder.acc) == len(sites)
        assert all(op.profile is None and op.occurrences == 1.0 for op in audit.stats.ops if op.steps)
    assert len(two.recorder.sites.sites) == len(four.recorder.sites.sites)
    assert len(two.recorder.builder.acc) == len(four.recorder.builder.acc)
    assert len(two.recorder.builder.series) == 2
    assert len(four.recorder.builder.series) == 4

    report = two.report.to_dict()
    assert report["run"]["internal_error"] is None
    assert len(report["ops"]) == len(two.recorder.sites.sites)


# -- 10,000 time steps -----------------------------------------------------------------------
class Loop(nn.Module):
    """h_t = tanh(x_t W_ih + h_{t-1} W_hh), W_hh orthogonal; W_ih is 3x4, so only W_hh recurs."""

    def __init__(self, d_in: int = 3, hidden: int = 4):
        super().__init__()
        self.w_ih = nn.Parameter(torch.randn(d_in, hidden) / math.sqrt(d_in))
        q, _ = torch.linalg.qr(torch.randn(hidden, hidden))
        self.w_hh = nn.Parameter(q)
        self.head = nn.Linear(hidden, 3)

    def forward(self, x):
        inputs = (x @ self.w_ih).unbind(1)          # one projection for all time steps
        h = x.new_zeros(x.shape[0], self.w_hh.shape[0])
        for x_t in inputs:
            h = torch.tanh(x_t + h @ self.w_hh)
        return self.head(h)


def _loop_site(audit: leaky.Audit):
    loops = [r for r in audit.stats.recurrences if r.kind == "loop"]
    assert [(r.module, r.param) for r in loops] == [("Loop", "w_hh")]
    return loops[0].op


def test_ten_thousand_time_steps_keep_one_profile():
    torch.manual_seed(0)
    model = Loop()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(2, TIME_STEPS, 3), torch.randint(0, 3, (2,))

    one = _train(model, opt, x, y, steps=1)
    _assert_released(one)
    op = _loop_site(one)
    assert op.op == "matmul" and op.occurrences == TIME_STEPS
    assert len(op.profile) == TIME_STEPS              # one value per time step, last step only
    for other in ("add", "tanh"):
        [site] = [o for o in one.stats.ops if o.op == other]
        assert len(site.profile) == TIME_STEPS
    recurrences = one.report.to_dict()["recurrences"]
    assert recurrences[0]["time_steps"] == TIME_STEPS
    assert 2 <= len(recurrences[0]["time_profile"]) <= 65

    three = _train(model, opt, x, y, steps=3)
    _assert_released(three)
    assert len(one.recorder.builder.series) == 1
    assert len(three.recorder.builder.series) == 3
    assert len(three.recorder.sites.sites) == len(one.recorder.sites.sites)
    assert len(three.recorder.builder.acc) == len(one.recorder.builder.acc)
    assert len(_loop_site(three).profile) == TIME_STEPS   # replaced each step, not appended
    assert all(len(acc.profile) in (0, TIME_STEPS) for acc in three.recorder.builder.acc.values())
    assert len(three.report.to_dict()["recurrences"][0]["time_profile"]) <= 65
