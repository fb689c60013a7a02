"""CutRecords alone: an instrument typed by its narrow host can be tested with no Recorder,
no mode and no audit, on real tensors and real autograd graphs."""
from __future__ import annotations

import torch
from torch import nn

from leaky.record.cuts import CutRecords
from leaky.record.leaves import MadeLeaves
from leaky.record.modules import ModuleTracker
from leaky.record.params import ParamTable
from leaky.record.sites import SiteTable, SourceLocator


class Host:
    """The five parts CutRecords asks for, made standalone, at step 3."""

    def __init__(self) -> None:
        self.locator, self.modules, self.sites, self.step = SourceLocator(), ModuleTracker(), SiteTable(), 3
        self.params = ParamTable(self.modules)
        self.leaves = None

    def site_of(self, node) -> None:
        return None   # no op of this graph was recorded at a site


def _records() -> CutRecords:
    host = Host()
    records = CutRecords(host)
    host.leaves = MadeLeaves(lambda t: False, records.leaf_reached)
    return records


def test_a_detach_of_a_tensor_that_needs_grad_is_one_cut_at_its_line_and_step():
    records = _records()
    weight = torch.randn(4, requires_grad=True)
    hidden = weight * 2
    for _ in range(2):                                               # the same place twice: one cut
        records.note_cut("detach", (hidden,)); line = _line()
    records.note_cut("detach", (torch.randn(4),))                   # nothing to cut: needs no grad
    (cut,) = records.cuts.values()
    assert cut.kind == "detach" and cut.step == 3 and cut.module is None
    assert cut.where[0] == __file__ and cut.where[1] == line


def test_an_in_place_write_to_a_parameter_outside_a_forward_is_its_init_not_a_cut():
    records = _records()
    weight = nn.Parameter(torch.empty(2, 2))
    with torch.no_grad():
        records.note_no_grad("normal_", (weight,)); line = _line()
    assert records.cuts == {} and records.init_sites[id(weight)][:2] == (__file__, line)


def _line() -> int:
    import sys
    return sys._getframe(1).f_lineno
