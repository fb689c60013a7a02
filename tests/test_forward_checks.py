"""The forward NaN/Inf check: every op's output once, without a second pass.

An op that can only pass on a non-finite value (a ReLU, a max-pool, a view, a softmax of
finite inputs...) is not checked again when its inputs were: these tests pin down that the
origin is still the op that made the value, at the step it made it, and that an input
nobody checked (a masked fill, raw data, a parameter) is still checked.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import leaky


def _forward_event(audit):
    events = [e for e in audit.stats.nonfinite if e.phase == "forward"]
    return events[0] if events else None


class _Blows(nn.Module):
    """Divides by a zero at step `at`; a ReLU, a max-pool and a flatten follow."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(4 * 4 * 4, 2)
        self.at, self.calls = at, 0

    def forward(self, x):
        h = self.conv(x)
        scale = torch.ones(()) if self.calls != self.at else torch.zeros(())
        self.calls += 1
        h = h / scale                                    # the origin
        h = F.max_pool2d(F.relu(h), 2).flatten(1)
        return self.head(h)


def test_a_nan_made_at_a_later_step_is_found_at_its_op_not_downstream():
    torch.manual_seed(0)
    model = _Blows(at=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 2, (8,))
    with leaky.audit(steps=None) as audit:
        for _ in range(5):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    event = _forward_event(audit)
    assert event is not None and event.step == 3
    assert event.op.op == "div"
    (finding,) = audit.report.by_code("LK107")
    assert finding.op == "div" and finding.step == 3


def test_a_softmax_after_a_masked_fill_is_still_checked():
    """masked_fill(-inf) is meant; the softmax of a row masked whole is NaN, and is found."""
    torch.manual_seed(0)
    proj = nn.Linear(6, 6)
    opt = torch.optim.SGD(proj.parameters(), lr=0.01)
    x = torch.randn(4, 6)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[2] = True                                       # row 2: every position masked
    with leaky.audit(steps=None) as audit:
        for _ in range(2):
            scores = proj(x).masked_fill(mask, -math.inf)
            attn = torch.softmax(scores, dim=-1)
            opt.zero_grad()
            (attn * x).sum().backward()
            opt.step()
    event = _forward_event(audit)
    assert event is not None and event.step == 0 and event.op.op == "softmax"


def test_a_relu_of_a_parameter_is_checked():
    """A tensor no recorded op made (a parameter, raw data) is not 'already checked': a ReLU
    applied to it directly is the origin of its NaN."""
    torch.manual_seed(0)
    gate = nn.Parameter(torch.tensor([1.0, math.nan, 2.0]))
    x = torch.randn(5, 3)
    with leaky.audit(steps=None) as audit:
        (F.relu(gate) * x).sum().backward()
    event = _forward_event(audit)
    assert event is not None and event.op.op == "relu"


def test_huge_finite_activations_are_not_called_non_finite():
    """1e25 is finite in float32; its square is not. Neither the first step (a norm) nor
    later ones (a sum) may call it NaN/Inf."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=1e-3)
    x = torch.randn(16, 4)
    with leaky.audit(steps=None) as audit:
        for _ in range(4):
            h = F.relu(lin(x) * 1e25) * 1e-25
            opt.zero_grad()
            h.pow(2).mean().backward()
            opt.step()
    assert _forward_event(audit) is None
    assert not audit.report.by_code("LK107")
