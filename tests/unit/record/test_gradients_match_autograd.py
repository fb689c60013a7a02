"""Recorded gradients equal torch.autograd.grad on small models (autograd is the oracle)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 7)
        self.fc2 = nn.Linear(7, 4)

    def forward(self, x):
        h = self.fc1(x)
        a = torch.sigmoid(h)
        c = torch.clamp(a, 0.3, 0.7)
        return self.fc2(c), (h, a, c)


def _one_step_reference():
    torch.manual_seed(3)
    net = Net()
    x, y = torch.randn(11, 5), torch.randint(0, 4, (11,))
    out, (h, a, c) = net(x)
    loss = F.cross_entropy(out, y)
    g_out, g_c, g_a, g_h = torch.autograd.grad(loss, [out, c, a, h])
    return net, x, y, {"out": g_out, "c": g_c, "a": g_a, "h": g_h}


def _audited_step(net, x, y):
    with leaky.audit() as audit:
        out, _ = net(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
    return audit


def _op(audit, op, module):
    found = [o for o in audit.stats.ops if o.op == op and o.module == module and o.steps]
    assert len(found) == 1, [(o.op, o.node, o.module) for o in audit.stats.ops]
    return found[0]


def test_op_gradients_equal_autograd():
    net, x, y, ref = _one_step_reference()
    audit = _audited_step(net, x, y)
    clamp = _op(audit, "clamp", "Net")
    sigmoid = _op(audit, "sigmoid", "Net")
    linear2 = _op(audit, "linear", "fc2")
    assert math.isclose(linear2.grad_in, ref["out"].norm().item(), rel_tol=1e-5)
    assert math.isclose(clamp.grad_in, ref["c"].norm().item(), rel_tol=1e-5)
    assert math.isclose(clamp.grad_out, ref["a"].norm().item(), rel_tol=1e-5)
    assert math.isclose(sigmoid.grad_in, ref["a"].norm().item(), rel_tol=1e-5)
    assert math.isclose(sigmoid.grad_out, ref["h"].norm().item(), rel_tol=1e-5)
    assert math.isclose(sigmoid.gain, (ref["h"].norm() / ref["a"].norm()).item(), rel_tol=1e-5)


def test_zeroed_share_counts_only_what_the_op_zeroed():
    net, x, y, ref = _one_step_reference()
    audit = _audited_step(net, x, y)
    clamp = _op(audit, "clamp", "Net")
    arriving = ref["c"] != 0
    zeroed = arriving & (ref["a"] == 0)
    assert clamp.nonzero_in == arriving.sum().item()
    assert math.isclose(clamp.zeroed_share, zeroed.sum().item() / arriving.sum().item(), rel_tol=1e-9)


def test_parameter_gradients_equal_autograd():
    net, x, y, _ = _one_step_reference()
    out, _ = net(x)
    reference = torch.autograd.grad(F.cross_entropy(out, y), list(net.parameters()))
    expected = {name: g.norm().item() for (name, _), g in zip(net.named_parameters(), reference)}
    net.zero_grad()
    audit = _audited_step(net, x, y)
    got = {p.name: p.grad_norm for p in audit.stats.params}
    assert got.keys() == expected.keys()
    for name in expected:
        assert math.isclose(got[name], expected[name], rel_tol=1e-5), name


def test_module_table_runs_from_loss_to_input():
    net, x, y, ref = _one_step_reference()
    audit = _audited_step(net, x, y)
    names = [row["module"] for row in audit.report.modules]
    assert names.index("fc2") < names.index("fc1")
    fc2 = next(row for row in audit.report.modules if row["module"] == "fc2")
    assert math.isclose(fc2["grad_norm"], ref["out"].norm().item(), rel_tol=1e-5)
    assert math.isclose(fc2["gain"], (ref["c"].norm() / ref["out"].norm()).item(), rel_tol=1e-5)


@pytest.mark.parametrize("shape", [(64, 32, 8, 8), (64, 32, 32, 32), (50, 3, 35, 35)])
def test_zeroed_share_of_a_large_gradient_is_estimated_within_a_percent(shape):
    """Above 2**16 elements the nonzero counts are taken on every 17th element: the share
    an op zeroes must still match the exact one, even for a pattern that repeats along the
    fastest-varying dimensions (a stride aligned with them would see only some columns)."""
    torch.manual_seed(0)
    x = torch.randn(*shape)
    x[:, :, :, ::2] = x[:, :, :, ::2].abs() + 0.1          # even columns always pass the ReLU
    x[:, ::4] = -x[:, ::4].abs() - 0.1                      # every 4th channel never does
    x.requires_grad_(True)
    with leaky.audit() as audit:
        y = torch.relu(x * 1.0)          # an intermediate, as in a network
        (y * torch.linspace(1, 2, y.numel()).reshape(y.shape)).sum().backward()
    exact = (x.detach() <= 0).float().mean().item()
    (relu,) = [op for op in audit.stats.ops if op.op == "relu"]
    assert x.numel() > 1 << 16
    assert abs(relu.zeroed_share - exact) < 0.01, (relu.zeroed_share, exact)


def test_a_gradient_summed_from_two_uses_is_normed_after_the_sum():
    """A tensor used twice (a residual connection) receives two gradients that autograd
    adds, possibly in place into the first; the norm arriving at its producer must be the
    sum's, not the first contribution's (leaky reuses the norm of a gradient one node sent
    only while that tensor is unchanged)."""
    torch.manual_seed(0)
    fc1, fc2 = nn.Linear(6, 6), nn.Linear(6, 3)
    x = torch.randn(5, 6)

    def forward():
        h = fc1(x)
        r = torch.tanh(h) + h           # h used twice: tanh branch and the skip
        return fc2(r).pow(2).sum(), h, r

    loss, h, r = forward()
    g_h, g_r = torch.autograd.grad(loss, [h, r])
    with leaky.audit() as audit:
        forward()[0].backward()
    linear1 = _op(audit, "linear", "fc1")
    tanh = [o for o in audit.stats.ops if o.op == "tanh"][0]
    assert math.isclose(tanh.grad_in, g_r.norm().item(), rel_tol=1e-5)
    assert math.isclose(linear1.grad_in, g_h.norm().item(), rel_tol=1e-5)


def test_step_and_parameter_norms_with_a_weight_used_twice():
    """A shared layer's .grad is the sum of two contributions, added in place into the
    first: its norm, and the step's total gradient norm, must be the sum's (leaky reuses
    a node's norm for a .grad only while that tensor is unchanged)."""
    torch.manual_seed(1)
    shared, head = nn.Linear(4, 4), nn.Linear(4, 2)
    opt = torch.optim.SGD([*shared.parameters(), *head.parameters()], lr=0.1)
    expected_total, expected_shared = [], []
    with leaky.audit(steps=3) as audit:
        for _ in range(3):
            x = torch.randn(8, 4)
            loss = head(torch.tanh(shared(torch.tanh(shared(x))))).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            with torch._C.DisableTorchFunction(), torch.no_grad():
                grads = [p.grad for p in [*shared.parameters(), *head.parameters()]]
                expected_total.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())
                expected_shared.append(shared.weight.grad.norm().item())
            opt.step()
    got_total = [row["grad_norm"] for row in audit.report.series]
    assert got_total == pytest.approx(expected_total, rel=1e-5)
    (weight,) = [p for p in audit.stats.params if p.name.endswith("weight") and "shared" in p.name]
    assert weight.grad_norm == pytest.approx(expected_shared[-1], rel=1e-5)


class _Mover(nn.Module):
    """Ops whose backward only moves values: a max-pool (non-overlapping), a flatten, a
    transpose, a chunk and a slice; and one that does not (an overlapping max-pool)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.head = nn.Linear(15, 3)

    def forward(self, x):
        h = self.conv(x)
        p = F.max_pool2d(h, 2)                       # 8x8 -> 4x4, windows apart
        q = F.max_pool2d(h, 3, stride=2, padding=1)  # windows overlap: values add up
        f = (p + q).flatten(2)                      # [B, 4, 16]
        t = f.transpose(1, 2)                       # [B, 16, 4]
        a, b = t.chunk(2, dim=2)                    # two [B, 16, 2]
        s = (a * b)[:, 1:]                          # a slice
        return self.head(s.sum(-1)), (h, p, q, f, t, a, b, s)


def test_gradients_of_value_moving_ops_equal_autograd():
    """The norm a view, a slice, a chunk or a non-overlapping max-pool sends is taken from the
    arriving norms, not recomputed: it must still be autograd's."""
    torch.manual_seed(0)
    net = _Mover()
    x, y = torch.randn(5, 2, 8, 8), torch.randint(0, 3, (5,))
    out, saved = net(x)
    grads = torch.autograd.grad(F.cross_entropy(out, y), list(saved), retain_graph=True)
    ref = dict(zip("h p q f t a b s".split(), (g.norm().item() for g in grads)))
    # what each pool sends back to h, alone: its arriving gradient routed through it
    h, p, q = saved[:3]
    ref["p->h"], ref["q->h"] = (torch.autograd.grad((pool * g.detach()).sum(), h, retain_graph=True)[0].norm().item()
                                for pool, g in ((p, grads[1]), (q, grads[2])))
    with leaky.audit() as audit:
        out, _ = net(x)
        F.cross_entropy(out, y).backward()
    by_op = {}
    for o in audit.stats.ops:
        by_op.setdefault(o.op, []).append(o)
    pools = sorted(by_op["max_pool2d"], key=lambda o: o.first_seq)
    assert math.isclose(pools[0].grad_in, ref["p"], rel_tol=1e-5)
    assert math.isclose(pools[0].grad_out, ref["p->h"], rel_tol=1e-5)
    assert math.isclose(pools[1].grad_in, ref["q"], rel_tol=1e-5)
    assert math.isclose(pools[1].grad_out, ref["q->h"], rel_tol=1e-5)   # taken, not assumed
    assert not math.isclose(ref["q->h"], ref["q"], rel_tol=1e-3)
    (flatten,) = by_op["flatten"]
    assert math.isclose(flatten.grad_in, ref["f"], rel_tol=1e-5)
    (transpose,) = by_op["transpose"]
    assert math.isclose(transpose.grad_in, ref["t"], rel_tol=1e-5)
    assert math.isclose(transpose.grad_out, ref["f"], rel_tol=1e-5)
    (chunk,) = by_op["chunk"]
    assert math.isclose(chunk.grad_in, math.hypot(ref["a"], ref["b"]), rel_tol=1e-5)
    assert math.isclose(chunk.grad_out, ref["t"], rel_tol=1e-5)
    (getitem,) = by_op["getitem"]
    assert math.isclose(getitem.grad_in, ref["s"], rel_tol=1e-5)


class _Tied(nn.Module):
    """fc1 used once; tied used twice (two gradients summed into one .grad)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 6)
        self.tied = nn.Linear(6, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        return self.head(self.tied(torch.tanh(self.tied(self.fc1(x)))))


@pytest.mark.parametrize("after_backward", ["nothing", "clip", "replace", "accumulate"])
def test_parameter_gradient_norms_follow_what_dot_grad_holds(after_backward):
    """A weight's .grad is a fresh copy of the transposed gradient its node sent, and its norm
    is reused from that node; it must still be the norm of what .grad holds at the step's
    end: after clipping in place, after the user replaces .grad, with a weight used twice,
    and with two backward calls adding into .grad."""
    torch.manual_seed(0)
    net = _Tied()
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    x, y = torch.randn(7, 5), torch.randint(0, 3, (7,))
    with leaky.audit() as audit:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        if after_backward == "clip":
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1e-3)
        elif after_backward == "replace":
            net.fc1.weight.grad = net.fc1.weight.grad * 3.0
        elif after_backward == "accumulate":
            F.cross_entropy(net(x * 2), y).backward()
        expected = {f"{m}.{n}": p.grad.norm().item() for m, mod in net.named_children()
                    for n, p in mod.named_parameters()}
        opt.step()
    got = {p.name: p.grad_norm for p in audit.stats.params}
    assert got.keys() == expected.keys()
    for name in expected:
        assert math.isclose(got[name], expected[name], rel_tol=1e-5), (name, got[name], expected[name])


@pytest.mark.parametrize("skip", [False, True])
def test_nonzero_counts_along_a_chain_of_zeroing_ops_equal_autograd(skip, monkeypatch):
    """A ReLU, a clamp and a mask in a row: each sends its gradient straight to the next
    counted node, whose arriving count reuses the one taken when it was sent (each such
    gradient counted once). Every op's arriving count and zeroed share equal those of the
    gradients autograd computes; with `skip`, the clamp's output is also used a second time,
    so the gradient arriving at the clamp is a sum, not what the mask sent, and is counted
    anew."""
    from leaky.record import gradients

    torch.manual_seed(1)
    fc1, fc2 = nn.Linear(6, 9), nn.Linear(9, 3)
    x = torch.randn(40, 6)
    mask = torch.rand(40, 9) < 0.3

    def forward():
        h = fc1(x)
        a = torch.relu(h)
        c = torch.clamp(a, 0.1, 0.6)
        m = c.masked_fill(mask, 0.0)
        out = fc2(m + 0.5 * c if skip else m)
        return out.pow(2).sum(), (h, a, c, m)

    loss, tensors = forward()
    g_h, g_a, g_c, g_m = torch.autograd.grad(loss, list(tensors))
    calls = []
    real = gradients._count_nonzero
    monkeypatch.setattr(gradients, "_count_nonzero", lambda g: calls.append(1) or real(g))
    with leaky.audit() as audit:
        forward()[0].backward()
    ops = {o.op: o for o in audit.stats.ops if o.op in ("relu", "clamp", "masked_fill")}
    for op, arriving, leaving in (("masked_fill", g_m, g_c if not skip else None), ("clamp", g_c, g_a),
                                  ("relu", g_a, g_h)):
        nonzero = (arriving != 0).sum().item()
        assert ops[op].nonzero_in == nonzero, op
        if leaving is not None:
            zeroed = ((arriving != 0) & (leaving == 0)).sum().item()
            assert math.isclose(ops[op].zeroed_share, zeroed / nonzero, rel_tol=1e-9), op
    # two counts a counted node, less one for each gradient sent unchanged to the next: the
    # chain's 3 nodes count 4 times; with the skip, the mul by 0.5 is counted too, and the
    # clamp's arriving sum is counted anew (8 - 1)
    assert len(calls) == (7 if skip else 4)
