"""TensorBoard: per-layer gradient norms, update ratios, dead and saturated shares, the
loss and gradient norm, and findings as text, written at every sampled step.

    leaky watch --tensorboard runs/leaky train.py
    with leaky.watch(tensorboard="runs/leaky"): ...
"""
from __future__ import annotations

import math
import os

from leaky.integrations import require
from leaky.report.tables import module_rows


def _tag(module: str) -> str:
    return module.replace("/", "_") or "root"


class TensorBoardSink:
    """Writes what a watch sampled; one SummaryWriter per run."""

    def __init__(self, logdir: str | os.PathLike) -> None:
        require("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logdir))

    def write(self, step: int, stats, findings, new) -> None:
        scalars = {"grad_norm": "gradient_norm", "dead_share": "dead_share", "saturated_share": "saturated_share"}
        for row in module_rows(stats):
            for key, name in scalars.items():
                value = row.get(key)
                if value is not None and math.isfinite(value):
                    self.writer.add_scalar(f"leaky/{name}/{_tag(row['module'])}", value, step)
        for param in stats.params:
            if param.update_ratios and len(param.shape) >= 2:
                ratio_step, ratio = param.update_ratios[-1]
                self.writer.add_scalar(f"leaky/update_ratio/{_tag(param.name)}", ratio, ratio_step)
        for row in stats.series[-1:]:
            if row.loss is not None and math.isfinite(row.loss):
                self.writer.add_scalar("leaky/loss", row.loss, row.step)
            if row.grad_norm is not None and math.isfinite(row.grad_norm):
                self.writer.add_scalar("leaky/total_gradient_norm", row.grad_norm, row.step)
        self.writer.add_scalar("leaky/findings", len(findings), step)
        for finding in new:
            self.writer.add_text(f"leaky/findings/{finding.code}",
                                 f"**{finding.severity.value} {finding.code} {finding.name}** at "
                                 f"{finding.where}\n\n{finding.message}\n\nfix: {finding.fix}", step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
