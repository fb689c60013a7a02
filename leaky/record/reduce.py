"""Reductions over a list of dims that may be empty: one value per unit, also when the
input holds a single sample (an unbatched vector).

NOTE: torch reads an empty dim list as "every dim": `torch.sum(x, [])` and
`torch.amax(x, [])` of a 1-d tensor are one 0-d number, not the tensor itself. A probe that
keeps one value per feature and sums over "the other dims" of a 1-d input (a model called
on one row at a time) would keep a scalar, and its per-feature list would be a float. Every
per-unit reduction in record/ goes through these.
"""
from __future__ import annotations

import torch
from torch import Tensor


def other_dims(ndim: int, keep: int) -> list[int]:
    """Every dim of an `ndim`-d tensor but `keep` (negative counts from the end)."""
    keep = keep % ndim if ndim else 0
    return [d for d in range(ndim) if d != keep]


def sum_over(x: Tensor, dims: list[int], dtype: torch.dtype | None = None) -> Tensor:
    """`x.sum(dims)`, and a copy of x (never x itself) when `dims` is empty."""
    if not dims:
        return x.to(dtype or x.dtype, copy=True)
    return x.sum(dims, dtype=dtype)


def amax_over(x: Tensor, dims: list[int]) -> Tensor:
    """`x.amax(dims)`, and a copy of x when `dims` is empty."""
    return x.amax(dims) if dims else x.clone()


__all__ = ["amax_over", "other_dims", "sum_over"]
