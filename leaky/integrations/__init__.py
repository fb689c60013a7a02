"""Thin adapters over the same recorder and checks: TensorBoard, Lightning, Hugging Face.

Each needs an optional extra; importing one without it gives a one-line error that names
the extra to install (`pip install leaky[tensorboard]`, `[lightning]`, `[transformers]`).
"""
from __future__ import annotations

import importlib


def require(module: str, extra: str):
    """Import an optional dependency or fail with the pip command that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"leaky's {extra} integration needs the '{module}' package: "
                          f"pip install 'leaky[{extra}]'") from None
