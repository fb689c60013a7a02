"""An output softmax that collapsed during training (LK101's rule), and the layer and
optimizer behind it: LK101 reports it, and LK202 reads it to know that the loss's fall is
no evidence of training.

A softmax on the loss path whose rows started with room to move, and whose rows over the
last observed steps are flat, all on the same entry (the mean row p̄ flat too), no longer
depends on its input. The loss of a policy gradient, −log p(a)·A, falls toward 0 as p(a) → 1
whether the return improves or not: while it collapses, a falling loss says nothing.
"""
from __future__ import annotations

from leaky.checks._util import severity_above
from leaky.config import AuditConfig
from leaky.finding import Severity
from leaky.stats import ActivationStats, AuditStats, ParamStats


def collapsed(act: ActivationStats, stats: AuditStats, config: AuditConfig) -> Severity | None:
    """An output softmax that became flat during training, every row on the same entry."""
    op = stats.op(act.site)
    if (op is None or not op.loss_path or act.recent_flat_share is None or act.recent_mean_row_share is None
            or act.first_flat_share is None or act.first_flat_share >= config.saturated_warning
            or act.recent_mean_row_share >= config.flat_derivative_share):
        return None
    return severity_above(act.recent_flat_share, config.saturated_warning, config.saturated_error)


def scores_param(act: ActivationStats, stats: AuditStats) -> ParamStats | None:
    """A trained parameter of the layer that computed the softmax's scores."""
    site = act.detail.get("scores_site")
    scores = stats.op(site) if site is not None else None
    if scores is None or scores.module is None:
        return None
    return next((p for p in stats.params if p.module == scores.module and p.in_optimizer), None)


def collapsed_optimizers(stats: AuditStats, config: AuditConfig) -> set[int]:
    """The optimizers whose loss runs through a collapsed output softmax: those that train the
    layer computing its scores."""
    found = set()
    for act in stats.activations:
        if act.detail.get("scores_site") is None or collapsed(act, stats, config) is None:
            continue
        param = scores_param(act, stats)
        if param is not None and param.optimizer is not None:
            found.add(param.optimizer)
    return found
