"""The merge across ranks (torchrun, DDP, FSDP): what must be judged globally.

At each sampled step, on every rank at once (DDP keeps ranks in step): the activation
counters are summed across ranks (a unit is dead only if it never fired on any rank), and,
once, each rank's first non-finite event is exchanged, so that rank 0 can report an
origin that happened on another rank's data. The collectives are process/distributed.py's
`exchange`, called by record/ at the step; this folds what it returned.
"""
from __future__ import annotations

from leaky.stats import NonFinite, OpStats, _source


class RankMerge:
    """Mixed into StatsBuilder: the global copies of what each rank saw."""

    def __init__(self) -> None:
        self.global_units: dict[int, dict] | None = None   # activation counters summed across ranks
        self.rank_events: list[dict] = []          # first non-finite event of each rank
        self.remote_events_done = False

    @property
    def events_wanted(self) -> bool:
        """Whether the next exchange should gather every rank's first non-finite event."""
        return not self.remote_events_done

    def merge_ranks(self, exchanged) -> None:
        """Fold what the ranks told each other at a sampled step (process/distributed.py
        `exchange`: its summed activation counters and, while wanted, their events)."""
        self.global_units = exchanged.units
        self.note_rank_events(exchanged.events)

    def first_nonfinite(self) -> tuple[str, int, int, str] | None:
        """This rank's first non-finite event: (phase, step, site, value); record/ describes
        the site for the other ranks, which number their sites otherwise."""
        if not self.nonfinite:
            return None
        phase, (step, site, value) = min(self.nonfinite.items(), key=lambda kv: (kv[1][0], kv[0] == "backward"))
        return phase, step, site, value

    def note_rank_events(self, events: list[dict]) -> None:
        if events:
            self.rank_events = events
            self.remote_events_done = True

    def with_rank_events(self, local: tuple) -> tuple:
        """The earliest origin over all ranks replaces later local echoes."""
        if not self.rank_events:
            return local
        first = min(self.rank_events, key=lambda e: (e["step"], e["phase"] == "backward", e["rank"]))
        op = OpStats(site=-1, op=first["op"], node=first["node"], module=first["module"], module_key=None,
                     source=_source((first["file"], first["line"]) if first["file"] else None), first_seq=-1,
                     steps=1, occurrences=1.0, grad_in=None, grad_out=None, grad_param=None, gain=None,
                     zeroed_share=None, nonzero_in=0.0, profile=None)
        return (NonFinite(first["phase"], first["step"], op, first["value"], first["rank"]),)
