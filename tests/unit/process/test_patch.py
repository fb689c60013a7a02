"""leaky.process.patch.Patch: the one way leaky replaces an attribute of torch or Python and puts it back."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch.autograd.function import Function

from leaky.process.patch import Patch, Patches


def test_the_original_is_back_after_an_error_and_a_classmethod_stays_one():
    original = Function.__dict__["apply"]
    seen = []

    def counting(method):
        def apply(cls, *args, **kwargs):
            seen.append(cls.__name__)
            return method.__func__(cls, *args, **kwargs)
        return classmethod(apply)

    class Double(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    x = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError), Patch(Function, "apply", counting):
        Double.apply(x).sum().backward()
        raise RuntimeError("the user's own error")
    assert seen == ["Double"] and x.grad.tolist() == [2.0, 2.0, 2.0]
    assert Function.__dict__["apply"] is original
    Double.apply(x)
    assert seen == ["Double"]


def _calling_through(previous):
    def showwarning(*args, **kwargs):
        return previous(*args, **kwargs)
    return showwarning


def test_unless_replaced_leaves_a_later_wrapper_in_place():
    original = warnings.showwarning
    try:
        with Patch(warnings, "showwarning", _calling_through, unless_replaced=True) as ours:
            later = _calling_through(ours.replacement)   # a library imported during the run wraps ours
            warnings.showwarning = later
        assert warnings.showwarning is later
        warnings.showwarning = original
        with Patch(warnings, "showwarning", _calling_through):
            warnings.showwarning = later
        assert warnings.showwarning is original
    finally:
        warnings.showwarning = original


def test_patches_leave_every_entered_patch_when_one_fails_to_enter():
    """A Patch whose attribute is missing fails on enter: the ones entered before it are left
    again, and the error goes on."""
    class Owner:
        a = "a"
        b = "b"

    patches = Patches([Patch(Owner, "a", lambda original: "A"), Patch(Owner, "missing", lambda original: "?"),
                       Patch(Owner, "b", lambda original: "B")])
    with pytest.raises(KeyError):
        patches.__enter__()
    assert (Owner.a, Owner.b) == ("a", "b")
    with Patches([Patch(Owner, "a", lambda original: "A"), Patch(Owner, "b", lambda original: "B")]):
        assert (Owner.a, Owner.b) == ("A", "B")
    assert (Owner.a, Owner.b) == ("a", "b")
