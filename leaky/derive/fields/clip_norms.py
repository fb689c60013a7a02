"""`stats.derived["clip_norms"]`: the norms the user's clipping acted on, each against the
global norm of the same gradients (record/instruments/clip_norms.py; several ranks only)."""
from __future__ import annotations

import torch

from leaky.derive.fields import derived
from leaky.record.run_record import RunRecord


@derived("clip_norms")
def clip_norms(run: RunRecord, sums) -> tuple[dict, ...]:
    """Per call on a sampled step, in order: {call, source {file, line}, step, covered, tensors,
    dtype, eps (its precision), ranks, norm (this rank's), global_norm, ratio, norm_mean and
    norm_spread (over the ranks)}."""
    noted = run.parts.get("clip_norms", ())
    if not noted:
        return ()
    # one copy of every value: they are device scalars until now
    values = torch.stack([v.float().cpu() for c in noted for v in (c.norm, c.global_norm, c.norm_mean, c.norm_rms)])
    host = iter(values.tolist())
    rows = []
    for call in noted:
        norm, total, mean, rms = next(host), next(host), next(host), next(host)
        rows.append({"call": call.call, "source": {"file": call.where[0], "line": call.where[1]}, "step": call.step,
                     "covered": list(call.covered), "tensors": call.tensors, "dtype": call.dtype,
                     "eps": torch.finfo(getattr(torch, call.dtype, torch.float32)).eps, "ranks": call.ranks,
                     "norm": norm, "global_norm": total, "ratio": norm / total if total else None,
                     "norm_mean": mean, "norm_spread": max(rms * rms - mean * mean, 0.0) ** 0.5})
    return tuple(rows)
