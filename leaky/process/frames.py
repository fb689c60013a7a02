"""Whose code a stack frame runs: leaky's own, torch's, or the user's.

Every place that looks for "the user's line" (where an op ran, where a warning belongs, what
a traceback shows, where a model's forward is written) asks here. Internal code is torch's,
leaky's own (its built-in examples under leaky/zoo are user code), the frozen import
machinery's and typing_extensions'; every other file is the user's.
"""
from __future__ import annotations

import functools
import os
from types import FrameType
from typing import Iterator

import torch

# NOTE: a prefix without a separator: the packages installed beside torch whose names start
# with it (torchvision, torchaudio) count as torch's too.
_TORCH = os.path.dirname(torch.__file__)
_LEAKY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # leaky/, the folder above process/
_OWN = _LEAKY + os.sep
_ZOO = os.path.join(_LEAKY, "zoo") + os.sep   # built-in examples: user code


def is_leaky_file(filename: str) -> bool:
    """A file of leaky's own code (its built-in examples are user code)."""
    return filename.startswith(_OWN) and not filename.startswith(_ZOO)


def is_internal(filename: str) -> bool:
    """A file that is not the user's: torch's, leaky's own, the import machinery's."""
    return (filename.startswith(_TORCH) or is_leaky_file(filename)
            or filename.startswith("<frozen") or "/typing_extensions" in filename)


_internal = functools.lru_cache(maxsize=None)(is_internal)   # a verdict per file, remembered


def user_frames(frame: FrameType | None) -> Iterator[FrameType]:
    """The user's frames from `frame` outward, innermost first."""
    while frame is not None:
        if not _internal(frame.f_code.co_filename):
            yield frame
        frame = frame.f_back


__all__ = ["is_internal", "is_leaky_file", "user_frames"]
