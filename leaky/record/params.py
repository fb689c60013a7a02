"""Which parameters a run trains: owned by a module that ran, held by an optimizer.

`ParamTable` answers the recorder's questions about parameters (whose gradient norms to
take at a sampled step, which module a parameter belongs to) and keeps, for `derive/`,
which optimizer and param group holds each one. It records; it computes no statistic.
"""
from __future__ import annotations

import torch
from torch import nn

from leaky.process import distributed


class ParamTable:
    def __init__(self, modules) -> None:
        self.modules = modules
        self.opt_params: dict[int, nn.Parameter] = {}        # id -> every parameter an optimizer holds
        self.param_group: dict[int, tuple[int, int]] = {}    # id(param) -> (optimizer index, group index)
        self._owners: dict[int, tuple[int, str, nn.Parameter]] = {}
        self._owners_seen = -1

    def note_optimizer(self, optimizer: torch.optim.Optimizer, index: int) -> None:
        for group_index, group in enumerate(optimizer.param_groups):
            for param in group["params"]:
                self.opt_params[id(param)] = param
                self.param_group.setdefault(id(param), (index, group_index))

    def owners(self) -> dict[int, tuple[int, str, nn.Parameter]]:
        """id(param) -> (module key, its name in that module, the parameter)."""
        if self._owners_seen != len(self.modules.infos):
            owners: dict = {}
            for key, pname, param in self.modules.parameters():
                owners.setdefault(id(param), (key, pname, param))
            self._owners = owners
            self._owners_seen = len(self.modules.infos)
        return self._owners

    def module_of(self, param: nn.Parameter) -> int | None:
        owner = self.owners().get(id(param))
        return None if owner is None else owner[0]

    def tracked(self) -> list[nn.Parameter]:
        """Every parameter that requires grad: in a module that ran, or in an optimizer."""
        params = {pid: p for pid, (_, _, p) in self.owners().items()}
        params.update(self.opt_params)
        return [p for p in params.values() if p.requires_grad]

    def collect_grads(self, buffer, known=None) -> tuple[list[int], int]:
        """Queue the norms of every present .grad into the step's values; `known(grad)` gives
        a norm already taken of that very tensor (or None), which is reused. Returns the
        parameters' ids and where their norms start in the value list."""
        with_grad = [p for p in self.tracked() if p.grad is not None and not p.grad.is_meta]
        offset = len(buffer.values)
        if with_grad:
            grads = [p.grad.coalesce().values() if p.grad.is_sparse else p.grad for p in with_grad]
            reused = [known(g) if known is not None else None for g in grads]
            with torch._C.DisableTorchFunction():
                computed = iter(distributed.foreach(torch._foreach_norm, [g for g, n in zip(grads, reused) if n is None])
                                if any(n is None for n in reused) else ())
            buffer.values.extend(n if n is not None else next(computed) for n in reused)
        return [id(p) for p in with_grad], offset
