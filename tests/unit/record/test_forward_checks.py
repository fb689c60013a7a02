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


def _audit_classifier(model, x, y, steps: int = 5):
    """`steps` SGD steps of a classifier on one batch, all audited."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with leaky.audit(steps=None) as audit:
        for _ in range(steps):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return audit


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
    audit = _audit_classifier(model, torch.randn(8, 1, 8, 8), torch.randint(0, 2, (8,)))
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


class _ConvBN(nn.Module):
    def __init__(self, norm: str) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4) if norm == "batch" else nn.GroupNorm(2, 4)
        self.head = nn.Linear(4 * 8 * 8, 2)

    def forward(self, x):
        return self.head(F.relu(self.norm(self.conv(x))).flatten(1))


def _train_conv_bn(model, steps, poison):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 2, (8,))
    with leaky.audit(steps=None) as audit:
        for step in range(steps):
            poison(model, step)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return audit


def test_a_nan_in_a_normalisers_bias_is_found_at_the_normaliser():
    """After the first step a normaliser's output is judged from its input (checked), its
    statistics and its affine parameters: a NaN bias still makes it the origin."""
    for norm in ("batch", "group"):
        torch.manual_seed(0)

        def poison(model, step):
            if step == 2:
                with torch.no_grad():
                    model.norm.bias[1] = math.nan

        event = _forward_event(_train_conv_bn(_ConvBN(norm), 4, poison))
        assert event is not None and event.step == 2, norm
        assert event.op.op == f"{norm}_norm", (norm, event.op.op)


def test_a_nan_before_a_normaliser_is_found_where_it_was_made():
    torch.manual_seed(0)

    def poison(model, step):
        if step == 2:
            with torch.no_grad():
                model.conv.weight[0, 0, 0, 0] = math.inf

    event = _forward_event(_train_conv_bn(_ConvBN("batch"), 4, poison))
    assert event is not None and event.step == 2 and event.op.op == "conv2d"


def test_a_layer_norm_of_a_constant_row_without_eps_is_found():
    """rstd = 1/sqrt(0 + eps) is infinite with eps = 0: the statistics say so."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 6)
    norm = nn.LayerNorm(6, eps=0.0)
    opt = torch.optim.SGD([*lin.parameters(), *norm.parameters()], lr=0.01)
    x = torch.randn(5, 4)
    with leaky.audit(steps=None) as audit:
        for step in range(3):
            h = lin(x)
            if step == 2:
                h = h * torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0]).unsqueeze(1)   # row 2: all zeros
            opt.zero_grad()
            norm(h).pow(2).mean().backward()
            opt.step()
    event = _forward_event(audit)
    assert event is not None and event.step == 2 and event.op.op == "layer_norm"


def test_a_clamp_whose_bound_is_a_nan_keyword_tensor_is_checked():
    """A bound passed by keyword is an input too: clamp(x, min=bound) with a NaN bound made
    outside any recorded op is the origin, although x itself was checked."""
    torch.manual_seed(0)
    lin = nn.Linear(3, 3)
    bound = torch.tensor([0.0, math.nan, 0.0])
    with leaky.audit(steps=None) as audit:
        torch.clamp(lin(torch.randn(4, 3)), min=bound).sum().backward()
    event = _forward_event(audit)
    assert event is not None and event.op.op == "clamp"


class _HiddenByInPlace(nn.Module):
    """At step `at` an add makes a -inf that an in-place ReLU then turns into 0: nothing
    downstream is non-finite, only the add's own output was."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.head = nn.Linear(8, 2)
        self.at, self.calls = at, 0

    def forward(self, x):
        h = self.fc(x)
        shift = torch.zeros(8)
        if self.calls == self.at:
            shift[3] = -math.inf
        self.calls += 1
        h = h + shift                   # the origin, a small output of a site checked on clean steps
        h = F.relu(h, inplace=True)     # overwrites it: -inf -> 0
        return self.head(h)


def test_a_non_finite_output_overwritten_in_place_later_is_still_found_at_its_op():
    """The -inf is found at the add that made it although the in-place ReLU after it hid it
    from everything downstream: each output is checked before a later call can overwrite
    it (a check taken later, batched with others, would have to be taken before any call
    that writes in place)."""
    torch.manual_seed(0)
    model = _HiddenByInPlace(at=3)
    audit = _audit_classifier(model, torch.randn(16, 6), torch.randint(0, 2, (16,)))
    event = _forward_event(audit)
    assert event is not None and event.step == 3 and event.op.op == "add", event
