"""Which square weights a recurrence reuses: h_t = f(h_{t-1} @ W) at one site, many times a step.

A matmul site whose activation input was computed from an earlier run of the same site
feeds back: its square weight is a recurrent matrix (derive/recurrence.py judges its
spectral radius). The question is a short graph walk per call; it is asked of a site only
until the answer is known (yes), or for its first FEEDBACK_STEPS observed steps (a
recurrence shows in its first step with two calls).
"""
from __future__ import annotations

from collections import defaultdict

from torch import Tensor, nn

from leaky.record.gradients import leads_to_param
from leaky.record.call_args import parameters_in

FEEDBACK_STEPS = 3   # observed steps in which a square matmul site is asked whether it feeds back


class FeedbackUses:
    """id(param) -> the matmul sites at which it was used on a value that site computed."""

    def __init__(self, mark) -> None:
        self.mark = mark   # the recorder's key in node.metadata: node -> site
        self.param_uses: dict[int, set[int]] = defaultdict(set)
        self._asked: dict[int, tuple] = {}   # matmul site -> (last step it was asked, steps asked)

    def note_matmul(self, args: tuple, site: int, step: int) -> None:
        asked = self._asked.get(site)
        if asked is not None and asked[1] >= FEEDBACK_STEPS and asked[0] != step:
            return   # asked in its first steps: no weight of this site is asked again (_still_asked)
        for param in parameters_in(args):
            if (param.ndim == 2 and param.shape[0] == param.shape[1] and self._still_asked(param, site, step)
                    and self._feeds_back(args, site)):
                self.param_uses[id(param)].add(site)

    def _still_asked(self, param, site: int, step: int) -> bool:
        if site in self.param_uses.get(id(param), ()):
            return False
        last, seen = self._asked.get(site, (None, 0))
        if last != step:
            if seen >= FEEDBACK_STEPS:
                return False
            self._asked[site] = (step, seen + 1)
        return True

    def _feeds_back(self, args: tuple, site: int, depth: int = 6) -> bool:
        """Whether this matmul's activation input was computed from an earlier run of the
        same site: the mark of a recurrence h_t = f(h_{t-1} @ W), not of x_t @ W_ih."""
        frontier = [a.grad_fn for a in args if isinstance(a, Tensor) and not isinstance(a, nn.Parameter)
                    and a.grad_fn is not None]
        seen = set()
        for _ in range(depth):
            following = []
            for node in frontier:
                if node is None or id(node) in seen or leads_to_param(node):
                    continue
                seen.add(id(node))
                if node.metadata.get(self.mark) == site:
                    return True
                following.extend(fn for fn, _ in node.next_functions)
            frontier = following
        return False
