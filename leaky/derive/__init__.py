"""derive/: the only place where statistics are computed.

    record/ (raw step records)  →  derive/  →  AuditStats  →  checks/, report/

- `accumulate.py`: each sampled step's HostStep folded into per-site, per-parameter and
  per-optimizer running sums; the every-step series.
- `ranks.py`: the merge across ranks.
- `assemble.py`: the end of a run (or a watch's check pass): AuditStats from the running
  sums and the run's RunRecord (record/run_record.py, the one contract between record/ and
  derive/: derive reads the record only through it).
- `modules.py`: the per-module table, once. `recurrence.py`: spectral radii.
  `origins.py`: where optimizers, schedulers and casts were set up.

`StatsBuilder` is what record/ is given as its sink: record/ calls add_step, add_series
and, with several ranks, merge_ranks with what its one exchange across ranks returned
(process/distributed.py `exchange`: the sink gives this rank's first non-finite event,
`first_nonfinite`, and record/ describes it). derive/ makes no collective call and reads
the record only through RunRecord, HostStep and the units' UnitStats.
"""
from __future__ import annotations

from leaky.derive.accumulate import StepFolder
from leaky.derive.assemble import build_stats
from leaky.derive.ranks import RankMerge


class StatsBuilder(StepFolder, RankMerge):
    """The running sums of one audit: host numbers only, no part of the record."""

    def __init__(self, config) -> None:
        StepFolder.__init__(self, config)
        RankMerge.__init__(self)
        self.radius_cache = None   # spectral radii, reused across a watch's check passes


__all__ = ["StatsBuilder", "build_stats"]
