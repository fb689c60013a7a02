"""The one user-frame test: leaky's own files (any room of the package) and torch's are not
the user's; leaky's built-in examples and the user's script are."""
from __future__ import annotations

import torch

import leaky.checks.dead_zone
import leaky.record.recorder
import leaky.zoo
from leaky.process import frames


def test_every_room_of_leaky_is_internal_and_its_examples_and_this_file_are_not():
    for module in (leaky.record.recorder, leaky.checks.dead_zone, frames):
        assert frames.is_internal(module.__file__), module.__name__
    assert frames.is_internal(torch.nn.functional.__file__)
    assert not frames.is_internal(leaky.zoo.__file__) and not frames.is_internal(__file__)
