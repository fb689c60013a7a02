"""The finite-difference check itself, on known-wrong and known-right backward functions."""
from __future__ import annotations

import torch
from torch import nn

import leaky
from leaky.record.gradcheck import check_function
from tests.conftest import no_leaky_left


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x * x * grad


class CubeWrong(Cube):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * x * grad      # wrong constant


class MulAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, scale: float):
        ctx.save_for_backward(a, b)
        ctx.scale = scale
        return a * b * scale

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return b * grad * ctx.scale, a * grad, None     # second input forgets `scale`


class Relu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0)


class Float32Inside(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.cos(x.float()).to(x.dtype) * grad


class NoisyCorrect(torch.autograd.Function):
    """Uses the global RNG in forward: the check must not move the user's random stream."""

    @staticmethod
    def forward(ctx, x):
        mask = (torch.rand_like(x) > 0.5).to(x.dtype)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask


def _x(*shape):
    return torch.randn(*shape, requires_grad=True)


def test_correct_backward_passes():
    result = check_function(Cube.apply, (_x(8, 3),))
    assert result.checked and result.wrong == ()


def test_wrong_backward_is_caught_with_its_error():
    result = check_function(CubeWrong.apply, (_x(8, 3),))
    (verdict,) = result.wrong
    assert verdict.index == 0
    assert abs(verdict.analytic / verdict.numeric - 2 / 3) < 1e-3


def test_the_wrong_input_is_named():
    result = check_function(lambda a, b: MulAdd.apply(a, b, 3.0), (_x(5), _x(5)))
    assert [v.index for v in result.wrong] == [1]


def test_a_kink_is_not_a_wrong_gradient():
    x = torch.tensor([0.0, 0.0, 1.0, -1.0, 0.0], requires_grad=True)
    assert check_function(Relu.apply, (x,)).wrong == ()


def test_float32_rounding_inside_is_not_a_wrong_gradient():
    result = check_function(Float32Inside.apply, (_x(50),))
    assert result.checked and result.wrong == ()


def test_a_random_forward_is_compared_with_itself_and_leaves_the_rng_alone():
    x = _x(6, 5)
    state = torch.random.get_rng_state()
    result = check_function(NoisyCorrect.apply, (x,))
    assert result.checked and result.wrong == ()
    assert torch.equal(torch.random.get_rng_state(), state)


def test_large_batched_inputs_are_sliced():
    result = check_function(Cube.apply, (_x(10_000, 3),))
    assert result.checked and result.wrong == ()


def test_audit_finds_the_wrong_function_and_keeps_training_identical():
    def train(fn, audited):
        torch.manual_seed(0)
        layer = nn.Linear(4, 4)
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        losses = []
        ctx = leaky.audit() if audited else None
        with ctx if ctx is not None else torch.enable_grad():
            for _ in range(3):
                h = fn.apply(layer(torch.randn(8, 4)))
                h = NoisyCorrect.apply(h)
                loss = h.pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.detach())
        return losses, ctx

    plain, _ = train(CubeWrong, audited=False)
    seen, audit = train(CubeWrong, audited=True)
    assert all(torch.equal(a, b) for a, b in zip(plain, seen))
    names = {f.op for f in audit.report.by_code("LK305")}
    assert names == {"CubeWrong"}
    assert no_leaky_left() == []
    assert torch.autograd.Function.__dict__["apply"].__func__.__qualname__ == "Function.apply"
