"""Leaves the script builds with requires_grad=True, and whether a loss reached them.

`torch.tensor(out.detach().numpy(), requires_grad=True)` or
`torch.tensor([model(x).item() ...], requires_grad=True)` is a new leaf: no parameter is
behind it, and requires_grad=True hides the cut (backward() runs and the loss is a
function of it). Such a leaf is a cut (LK108) when a loss reached it (its .grad is set) and
no optimizer trains it; a raw tensor optimised on purpose (a style-transfer image, a
temperature) is in an optimizer, and a leaf that no loss reached is data.

Per line that builds one, only the latest leaf is kept (by weak reference): each is
settled, reached or not, when the next one is built there and at each step's end. A
settled leaf is read with two attribute reads (.grad, and its id in the optimizers), never
a value.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

LIMIT = 256   # lines that build leaves, at most


@dataclass
class MadeLeaf:
    ref: weakref.ref
    where: tuple
    module: int | None
    step: int
    producers: tuple      # modules behind the cuts made on the same line (x.detach().requires_grad_())
    prediction: bool = False   # reached by a loss with no layer between (record/loss_path.py)


class MadeLeaves:
    """`trained(tensor)`: an optimizer holds it; `on_reached(leaf)`: a loss reached a leaf built
    on a line for the first time (or, later, as the prediction itself)."""

    def __init__(self, trained, on_reached) -> None:
        self.trained = trained
        self.on_reached = on_reached
        self.latest: dict[tuple, MadeLeaf] = {}     # (file, line) -> the latest leaf built there
        self.reached: dict[tuple, MadeLeaf] = {}    # (file, line) -> a leaf built there that a loss reached

    def note(self, tensor, where: tuple, module: int | None, step: int, producers: tuple) -> None:
        line = where[:2]
        self._settle(line)
        if line not in self.latest and len(self.latest) >= LIMIT:
            return
        try:
            ref = weakref.ref(tensor)
        except TypeError:   # a tensor subclass without weak references
            return
        self.latest[line] = MadeLeaf(ref, where, module, step, producers)

    def on_loss_path(self, leaf_ids: set[int]) -> None:
        """The leaves a loss reached with no layer between: the prediction itself."""
        if not leaf_ids:
            return
        for leaf in self.latest.values():
            tensor = leaf.ref()
            if tensor is not None and id(tensor) in leaf_ids:
                leaf.prediction = True

    def settle(self) -> None:
        """At a step's end."""
        for line in list(self.latest):
            self._settle(line)

    def _settle(self, line: tuple) -> None:
        leaf = self.latest.get(line)
        tensor = None if leaf is None else leaf.ref()
        if tensor is None or tensor.grad is None or self.trained(tensor):
            return
        known = self.reached.get(line)
        if known is None or leaf.prediction and not known.prediction:
            self.reached[line] = leaf
            self.on_reached(leaf)
