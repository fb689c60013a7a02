"""`stats.derived["loss_ranks"]`: with several ranks, whose losses the loss series holds
(record/monitor.py averages each step's loss over the ranks at the batched host copy)."""
from __future__ import annotations

from leaky.derive.fields import derived
from leaky.record.run_record import RunRecord


@derived("loss_ranks")
def loss_ranks(run: RunRecord, sums) -> dict:
    """{ranks, averaged (steps whose loss is the ranks' mean), alone (steps of rank 0's loss alone)}."""
    ranks, averaged, alone = run.loss_ranks
    return {"ranks": ranks, "averaged": averaged, "alone": alone}
