"""The held-out steps see the program's models as they were at step K, whatever it writes.

`StepControl` undoes each optimizer step after step K. A program also writes into its models
outside the optimizer: a DQN copies its Q-network into the target network every N steps
(`target_net.load_state_dict(q_net.state_dict())`), a BatchNorm updates its running
statistics. After step K such a write would change what the held-out steps measure: right
after a sync, a DQN's TD error is measured against targets made by the very network being
scored, so it grows with how much that network learned. `FrozenModules` keeps every known
module's own parameters and buffers at their step-K values: a write is seen by the tensor's
version counter (a cheap integer, bumped by every in-place write) and undone before the
module next runs.
"""
from __future__ import annotations

from itertools import chain
from typing import Iterable

import torch
from torch import nn
from torch.nn.modules import module as module_globals


class FrozenModules:
    """Context manager: the modules' own tensors put back to their values at entry before
    each forward of their module, and whenever `settle()` is called."""

    def __init__(self, modules: Iterable[nn.Module]) -> None:
        self._modules = list({id(m): m for m in modules}.values())
        self._saved: dict[int, list] = {}       # id(tensor) -> [tensor, value at entry, version]
        self._handle = None
        self.restored = 0                        # tensors put back (a count, for tests)

    def __enter__(self) -> "FrozenModules":
        with torch.no_grad():
            for module in self._modules:
                for tensor in _own(module):
                    if id(tensor) not in self._saved and not tensor.is_inference():
                        self._saved[id(tensor)] = [tensor, tensor.detach().clone(), tensor._version]
        self._handle = module_globals.register_module_forward_pre_hook(self._before_forward)
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._saved.clear()

    def _before_forward(self, module: nn.Module, args) -> None:
        self._restore(self._saved.get(id(t)) for t in _own(module))

    def settle(self) -> None:
        """Put back every tensor written since (after an optimizer step, say)."""
        self._restore(self._saved.values())

    def _restore(self, entries) -> None:
        with torch.no_grad():
            for entry in entries:
                if entry is None:
                    continue
                tensor, value, version = entry
                if tensor._version != version:
                    tensor.copy_(value)
                    entry[2] = tensor._version
                    self.restored += 1


def _own(module: nn.Module):
    return chain(module.parameters(recurse=False), module.buffers(recurse=False))
