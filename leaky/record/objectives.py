"""What each optimizer's loss is measured against: rival optimizers and moving targets.

Two facts decide how a loss curve may be judged (checks/_loss.py), and neither can be read
off the curve itself:

- `CouplingMeter`: whether the backward of the loss that optimizer A steps on sends
  gradient into parameters that optimizer B trains. In a GAN the generator's loss runs
  through the discriminator; in an actor-critic the actor's loss runs through the critic.
  Seen on sampled steps by whether B's `.grad` tensors were written (a new tensor, or an
  in-place accumulation that bumps its version counter) between A's first backward() and
  A's step(): a few attribute reads per optimizer, no device work.
- `MovingWeights`: whether weights that no optimizer holds change during training: a DQN
  target network synced from the trained one (`load_state_dict`, `.data.copy_`), an EMA
  teacher. Writes through `.data` leave no trace in the version counter, so each step
  takes one sum of the first elements of such a weight, on the device, copied to the host
  with the loss series in batches. Before any sync, the first step already shows one
  structurally: such a weight that holds exactly the values of a trained one is a copy of
  the trained model (`target.load_state_dict(model.state_dict())`, `copy.deepcopy(model)`),
  made to give the targets (`copied`).
"""
from __future__ import annotations

from collections import deque

import torch
from torch import Tensor

_MARKED_PARAMS = 4     # parameters per optimizer whose .grad is watched (first two, last two)
_PRINT_ELEMENTS = 64   # elements of a weight summed for its fingerprint
_ROOT_PARAMS = 2       # weights fingerprinted per root module
SYNC_LIMIT = 100_000   # sync steps kept (as many as the loss series)


def _grad_mark(optimizer) -> tuple:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    picked = params[:2] + params[-2:] if len(params) > _MARKED_PARAMS else params
    return tuple((0, -1) if p.grad is None else (id(p.grad), p.grad._version) for p in picked)


class CouplingMeter:
    """Pairs (A, B): the loss A stepped on reached parameters that B trains."""

    def __init__(self) -> None:
        self.pairs: set[tuple[int, int]] = set()
        self._marks: list[tuple] | None = None

    def at_first_backward(self, optimizers: list) -> None:
        self._marks = [_grad_mark(optimizer) for optimizer in optimizers]

    def at_step(self, optimizers: list, index: int) -> None:
        marks, self._marks = self._marks, None
        if marks is None:
            return
        for other, (optimizer, mark) in enumerate(zip(optimizers, marks)):
            if other != index and _grad_mark(optimizer) != mark:
                self.pairs.add((index, other))


class MovingWeights:
    """Steps at which weights outside every optimizer had changed since the step before."""

    def __init__(self) -> None:
        self.syncs: deque[int] = deque(maxlen=SYNC_LIMIT)
        self._key: tuple | None = None
        self._generation = 0             # bumped whenever the set of weights watched changes
        self._params: list[Tensor] = []
        self._pending: list[tuple[int, int, Tensor]] = []
        self._last: tuple[int, list[float]] | None = None
        self.copied = False              # an untrained weight held a trained weight's values

    def before_first_update(self, modules, trained: dict) -> None:
        """At an optimizer's first step, before it changes anything: whether an untrained
        weight is a copy of a trained one (`copied`)."""
        if not self.copied and trained:
            self.copied = _copies_trained(_untrained(modules, trained), trained)

    def at_step_end(self, step: int, modules, trained: dict) -> None:
        """Queue this step's fingerprint of the untrained weights (no host sync)."""
        if not trained:
            return
        key = (len(modules.infos), len(trained))
        if key != self._key:
            self._key, self._params = key, _untrained(modules, trained)
            self._generation += 1
        if not self._params:
            return
        with torch._C.DisableTorchFunction(), torch.no_grad():
            sums = [p.detach().reshape(-1)[:_PRINT_ELEMENTS].float().sum() for p in self._params]
            prints = torch.stack([s.to(sums[0].device) for s in sums])
        self._pending.append((step, self._generation, prints))

    def flush(self) -> None:
        """One device-to-host copy of the queued fingerprints; note the steps they changed."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        device = pending[0][2].device
        with torch._C.DisableTorchFunction():
            flat = torch.cat([prints.to(device) for _, _, prints in pending]).cpu().tolist()
        at = 0
        for step, generation, prints in pending:
            values = flat[at:at + len(prints)]
            at += len(prints)
            if self._last is not None and self._last[0] == generation and self._last[1] != values:
                self.syncs.append(step)
            self._last = (generation, values)


def _untrained(modules, trained: dict) -> list[Tensor]:
    """Up to _ROOT_PARAMS floating weights per root module that no optimizer holds."""
    per_root: dict[int, list[Tensor]] = {}
    for key, _, param in modules.parameters():
        root = modules.infos[key].root
        picked = per_root.setdefault(root, [])
        if (len(picked) < _ROOT_PARAMS and id(param) not in trained and param.is_floating_point()
                and param.numel() and not param.is_meta and not param.is_sparse and type(param).__name__ == "Parameter"):
            picked.append(param)
    return [p for picked in per_root.values() for p in picked]


def _copies_trained(untrained: list[Tensor], trained: dict) -> bool:
    """Whether one of the untrained weights holds exactly the values of a trained weight: a
    target network or an EMA teacher copied from the model (a frozen backbone or teacher of
    its own holds other values). Read-only, once per optimizer.

    NOTE: a constant weight (a zero bias, a LayerNorm's ones) equals any other like it, and
    says nothing: it is left out."""
    peers: dict[tuple, list[Tensor]] = {}
    for param in trained.values():
        peers.setdefault((tuple(param.shape), param.dtype, param.device), []).append(param)
    with torch._C.DisableTorchFunction(), torch.no_grad():
        for weight in untrained:
            same = peers.get((tuple(weight.shape), weight.dtype, weight.device))
            flat = weight.detach().reshape(-1)
            if not same or flat.numel() < 2 or bool((flat == flat[0]).all()):
                continue
            if any(torch.equal(weight.detach(), other.detach()) for other in same):
                return True
    return False
