"""LK306 batch-mixing: the model's output for one sample depends on other samples.

A model is a function of one sample, applied to a batch for speed: y_i = f(x_i). Then
∂y_i/∂x_j = 0 for every j ≠ i, exactly. The probe (record/batch_mixing.py) reads that
Jacobian row by backprop, once: the gradient of one output row with respect to the whole
input batch. Nonzero rows j ≠ i mean the batch leaks into each prediction: a `view`
that scattered samples over the time steps of a time-major RNN, a softmax or a norm over
dim 0, a matmul that contracts over the batch. Training still runs and the loss may even
fall, but each prediction uses its neighbours, so it changes with the batch, and at batch
size 1 (inference) the model is a different function.

Mixing by design is not a bug: batch norm in training mode (probed in eval mode, on its
running statistics), batch norm without running statistics, message passing over a graph
given as input, and a mixture-of-experts router (info: capacity shared over the batch).
"""
from __future__ import annotations

from leaky import ops
from leaky.checks import register
from leaky.config import AuditConfig
from leaky.finding import Cause, Finding, Severity
from leaky.stats import ROUTER, AuditStats, BatchMixingStats

_ROUTING = "a mixture-of-experts router shares each expert's capacity over the batch"


@register("LK306", "batch-mixing", "the output for one sample depends on other samples of the batch")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    for probe in stats.batch_mixing:
        if probe.judged and probe.mixed and probe.by_design in (None, ROUTER):
            findings.append(_finding(probe, stats.module_types.get(probe.module or "", "")))
    return findings


def _finding(p: BatchMixingStats, module_type: str) -> Finding:
    model = p.model or "the model"
    start = (f"it starts at `{p.op}`" + (f" in {p.module}" if p.module else "")
             + (f": rows of its output {p.shape} along dim {p.dim} (size {p.batch}) each draw on several samples"
                if p.shape is not None else "")) if p.op else "the op where it starts was not found"
    evidence = {"model": p.model, "batch": p.batch, "row": p.row, "samples_reached": p.reached,
                "differentiated": p.point, "pairs_mixing": p.pairs, "first_op": p.op, "first_module": p.module,
                "first_dim": p.dim, "first_shape": list(p.shape) if p.shape else None,
                "batchnorm_eval": list(p.batchnorm_eval), "by_design": p.by_design}
    bn = (f" Batch norm ({', '.join(p.batchnorm_eval)}) was probed in eval mode, on its running statistics, so it "
          "is not what mixes." if p.batchnorm_eval else "")
    if p.by_design == ROUTER:
        message = (f"{model}'s output for sample {p.row} depends on {p.reached} other samples of the batch of "
                   f"{p.batch} (∂y_{p.row}/∂x_j ≠ 0 for j ≠ {p.row}); {start}. By design: {_ROUTING}.{bn}")
        return Finding("batch-mixing", "LK306", Severity.INFO, message,
                       "Nothing to fix if the routing is meant to share capacity; expect predictions to change "
                       "with the batch they come in, and evaluate at the batch size you will serve.",
                       p.module, p.op, p.source, 0, evidence)
    message = (f"{model}'s output for sample {p.row} depends on {p.reached} other samples of the batch of {p.batch}: "
               f"∂y_{p.row}/∂x_j ≠ 0 for j ≠ {p.row}, where a per-sample model has exactly 0; {start}. Each "
               "prediction uses its neighbours, so it changes with the batch, and at batch size 1 the model is "
               f"another function.{bn}")
    fix = ops.batch_mixing_fix(p.op, p.dim) if p.op else \
        "Find the op that combines rows of the batch (a view for a transpose, a softmax or norm over dim 0)."
    if p.time_major:
        fix = (f"{p.module} is a time-major {module_type}: it reads dim 0 of its input as time and dim 1 as the batch. "
               "Give it batch_first=True, or transpose the input to (T, B, ...) first.")
    cause = Cause.at(p.source, f"`{p.op}` mixes the batch here") if p.op else None
    return Finding("batch-mixing", "LK306", Severity.ERROR, message, fix, p.module, p.op, p.source, 0, evidence, cause)
