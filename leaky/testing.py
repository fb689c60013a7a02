"""`assert_gradient_flow`: a leaky audit inside the user's own pytest suite.

    from leaky.testing import assert_gradient_flow

    def test_model_learns():
        assert_gradient_flow(model, (x, y), torch.nn.functional.cross_entropy,
                             optimizer=torch.optim.Adam(model.parameters()), steps=5,
                             accept=["update-ratio"])

It fails with the findings in the message; `accept` names (or codes) findings that are
expected. Without an optimizer it runs one forward and backward and leaves the
parameters' .grad as they were.

Hand-built stats, for a check's small tests (ruff-style: one that must trigger it, one that
must not), without a training run. Every builder takes keywords only, and every field has a
default that stays out of the way, so a test names only what its check reads:

    from leaky.checks import CHECKS
    from leaky.config import AuditConfig
    from leaky.testing import activation, stats

    relu = activation(op="relu", module="fc1", units=100, dead_units=70)
    (finding,) = CHECKS["LK102"].run(stats(steps=20, activations=(relu,)), AuditConfig())

    stats(**fields)         AuditStats, every field empty unless given
    source(line=, file=)    Source: a line of the user's script ("train.py")
    op(...)                 OpStats: one site (module, op, autograd node, line) and its gradient
    activation(...)         ActivationStats: per-unit dead / flat / peaked shares of one activation
    param(...)              ParamStats: a parameter's gradient, update ratios, optimizer and group
    optimizer(...)          OptimizerStats: its kind, lines, and one param group's lr (`lr=`)
    scheduler(...)          SchedulerStats
    series(losses=, ...)    SeriesRow rows, one per step: the loss and gradient-norm curves
    loss_probe(...)         LossStats: what reached one loss call
    input_stats(...)        InputStats: raw data entering a layer, per-feature mean and std
    weight(...)             WeightStats: a layer weight at initialisation
    recurrence(...)         RecurrenceStats: a recurrent weight's spectral radius and time profile
    nonfinite(...)          NonFinite: the first NaN/Inf, forward or backward
    cut(...)                Cut: where a tensor left the graph (.detach(), .data, no_grad, ...)
    function(...)           FunctionStats: a custom autograd.Function re-checked by finite differences
    cast(...)               CastStats: where float16/bfloat16 was chosen
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Callable, Iterable, Sequence

import torch

from leaky.audit import audit
from leaky.finding import Finding, Severity, Source
from leaky.report.terminal import finding_renderable
from leaky.stats import (ActivationStats, AuditStats, BatchMixingStats, CastStats, Cut, FunctionStats, InputStats, LossStats,
                         NonFinite, OpStats, OptimizerStats, ParamStats, RecurrenceStats, SchedulerStats,
                         SeriesRow, WeightStats)

_RANK = {"error": 2, "warning": 1, "info": 0}


def _forward(model, batch) -> tuple[Any, Any]:
    if isinstance(batch, dict):
        return model(**batch), batch
    inputs, target = batch
    if isinstance(inputs, (tuple, list)):
        return model(*inputs), target
    return model(inputs), target


def assert_gradient_flow(model: torch.nn.Module, batch, loss_fn: Callable, *,
                         optimizer: torch.optim.Optimizer | None = None, steps: int = 1,
                         accept: Iterable[str] = (), fail_on: str = "warning") -> list[Finding]:
    """Audit `steps` training steps on `batch`; raise AssertionError on unaccepted findings.

    batch: (inputs, target) with loss = loss_fn(model(inputs), target), or a dict of model
    keyword arguments with loss = loss_fn(model(**batch), batch). Returns all findings.
    """
    if fail_on not in _RANK:
        raise ValueError(f"fail_on must be one of {sorted(_RANK)}, not {fail_on!r}")
    accepted = {a.lower() for a in accept}
    saved = {p: p.grad for p in model.parameters()} if optimizer is None else {}
    try:
        with audit(steps=None) as observed:
            for _ in range(max(1, steps)):
                output, target = _forward(model, batch)
                loss = loss_fn(output, target)
                if optimizer is not None:
                    optimizer.zero_grad()
                loss.backward()
                if optimizer is not None:
                    optimizer.step()
                else:
                    break
    finally:
        for param, grad in saved.items():
            param.grad = grad
    findings = list(observed.report.findings)
    failing = [f for f in findings if f.severity.rank >= _RANK[fail_on]
               and f.name not in accepted and f.code.lower() not in accepted]
    if failing:
        lines = "\n".join(str(finding_renderable(f)) for f in failing)
        raise AssertionError(f"leaky found {len(failing)} gradient-flow problem(s) "
                             f"(accept=[...] takes names or codes):\n{lines}")
    return findings


def stats(**fields: Any) -> AuditStats:
    """Hand-built AuditStats: every field empty unless given (keywords only), e.g.
    `stats(steps=20, series=series(losses=[...]), optimizers=(optimizer(),))`. The per-module
    table is derived from the ops, activations, parameters and recurrences given, as a run's
    would be, unless `module_table` is given too."""
    built = dataclasses.replace(AuditStats.empty(), **fields)
    if "module_table" in fields:
        return built
    from leaky.derive.modules import module_table

    table = module_table(built.ops, built.activations, built.params, built.recurrences, built.module_types)
    return dataclasses.replace(built, module_table=table)


def source(*, line: int = 1, file: str = "train.py") -> Source:
    """A line of the user's script."""
    return Source(file, line)


def op(*, site: int = 0, op: str = "linear", node: str | None = None, module: str | None = "fc",
       module_key: int | None = None, source: Source | None = None, first_seq: int | None = None, steps: int = 20,
       occurrences: float = 1.0, grad_in: float | None = 1.0, grad_out: float | None = None,
       grad_param: float | None = None, gain: float | None = None, zeroed_share: float | None = None,
       nonzero_in: float = 0.0, profile: tuple[float, ...] | None = None, detail: dict | None = None,
       out_rms: float | None = None, underflow_share: float | None = None,
       subnormal_share: float | None = None, zero_steps: int | None = None, loss_path: bool = False,
       zeroed_mass_share: float | None = None) -> OpStats:
    """One op site. node defaults to a name made from the op ("ClampBackward0"); first_seq
    (its place in forward order) to the site number; zero_steps (the steps its zeros were
    counted on) to steps; loss_path: no layer between it and the loss; zeroed_mass_share: of
    the gradient's mass arriving, the share it zeroed."""
    return OpStats(site, op, node if node is not None else _node_name(op), module, module_key, source,
                   site if first_seq is None else first_seq, steps, occurrences, grad_in, grad_out, grad_param,
                   gain, zeroed_share, nonzero_in, profile, dict(detail or {}), out_rms, underflow_share,
                   subnormal_share, steps if zero_steps is None else zero_steps, loss_path, zeroed_mass_share)


def _node_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.strip("_").split("_")) + "Backward0"


_op = op   # for the builders below, whose own `op` keyword hides it


def activation(*, site: int = 0, op: str = "relu", family: str | None = None, module: str | None = "fc",
               source: Source | None = None, units: int = 100, samples: int = 640, dead_units: int | None = None,
               died_steps: tuple[int, ...] = (), window: int = 5, flat_share: float | None = None,
               stuck_share: float | None = None, median_derivative_share: float | None = None,
               peaked_share: float | None = None, detail: dict | None = None, histogram: dict | None = None,
               seen_dead_steps: tuple[int, ...] = (), window_span: tuple[int, int] | None = None,
               first_flat_share: float | None = None, first_jacobian_share: float | None = None,
               recent_flat_share: float | None = None, recent_mean_row_share: float | None = None,
               recent_span: tuple[int, int] | None = None) -> ActivationStats:
    """One activation site. family defaults to the op's name ("relu", "sigmoid", ...); samples
    are per unit over all observed steps (640: 32 a step over 20 steps)."""
    return ActivationStats(site, op, family if family is not None else op.strip("_"), module, source, units,
                           samples, dead_units, tuple(died_steps), window, flat_share, stuck_share,
                           median_derivative_share, peaked_share, dict(detail or {}), histogram,
                           tuple(seen_dead_steps), window_span, first_flat_share, first_jacobian_share,
                           recent_flat_share, recent_mean_row_share, recent_span)


def param(*, name: str = "fc.weight", module: str | None = None, module_key: int | None = None,
          shape: tuple[int, ...] = (8, 8), requires_grad: bool = True, in_optimizer: bool = True,
          grad_steps: int = 20, grad_norm: float | None = 1.0, update_ratio: float | None = None,
          update_ratio_max: float | None = None, update_ratios: Sequence[tuple[int, float]] = (),
          zero_update_steps: int = 0, graded_update_steps: int | None = None, optimizer: int | None = None,
          group: int | None = None, source: Source | None = None, created_after_optimizer: bool = False,
          loss_change_bound: float | None = None, root: str | None = None,
          weight_norm: float | None = None, dtype: str | None = "float32",
          rounded_share: float | None = None) -> ParamStats:
    """One parameter. module defaults to the name's prefix ("fc"); update_ratio and
    update_ratio_max to the median and the largest of update_ratios ((step, ratio) pairs);
    graded_update_steps to their count; optimizer and group to 0 when in_optimizer."""
    ratios = tuple(update_ratios)
    values = [ratio for _, ratio in ratios]
    if update_ratio is None and values:
        update_ratio = statistics.median(values)
    if update_ratio_max is None and values:
        update_ratio_max = max(values)
    if optimizer is None and in_optimizer:
        optimizer = 0
    if group is None and in_optimizer:
        group = 0
    return ParamStats(name, name.rsplit(".", 1)[0] if module is None and "." in name else module, module_key,
                      tuple(shape), requires_grad, in_optimizer, grad_steps, grad_norm, update_ratio,
                      update_ratio_max, ratios, zero_update_steps,
                      len(ratios) if graded_update_steps is None else graded_update_steps, optimizer, group,
                      source, created_after_optimizer, loss_change_bound, root, weight_norm, dtype, rounded_share)


def optimizer(*, index: int = 0, kind: str = "Adam", source: Source | None = None, step_source: Source | None = None,
              zero_grad_sources: tuple[Source, ...] = (), cleared_steps: int = 0, cleared_source: Source | None = None,
              lr: float | None = 1e-3, initial_lrs: tuple[float | None, ...] | None = None,
              lr_range: tuple[tuple[float, float] | None, ...] | None = None, scheduler: SchedulerStats | None = None,
              closure_calls: int = 0) -> OptimizerStats:
    """One optimizer with one param group: initial_lrs defaults to (lr,), lr_range (the
    lowest and highest rate seen) to ((lr, lr),)."""
    return OptimizerStats(index, kind, source, step_source, tuple(zero_grad_sources), cleared_steps, cleared_source,
                          (lr,) if initial_lrs is None else tuple(initial_lrs),
                          ((lr, lr),) if lr_range is None else tuple(lr_range), scheduler, closure_calls)


def scheduler(*, kind: str = "LambdaLR", source: Source | None = None,
              function_source: Source | None = None) -> SchedulerStats:
    return SchedulerStats(kind, source, function_source)


def series(*, losses: Sequence[float | None] | None = None, grad_norms: Sequence[float | None] | None = None,
           lr: float | Sequence[float | None] | None = 1e-3, optimizer: int | None = 0, start: int = 0,
           every: int = 1) -> tuple[SeriesRow, ...]:
    """One row per step, steps start, start + every, ...: losses (None: no loss that step),
    grad_norms (default 1.0), lr (one rate for every row, or one per row)."""
    count = len(losses) if losses is not None else len(grad_norms or ())
    losses = [None] * count if losses is None else list(losses)
    norms = [1.0] * count if grad_norms is None else list(grad_norms)
    lrs = list(lr) if isinstance(lr, Sequence) else [lr] * count
    if not len(losses) == len(norms) == len(lrs):
        raise ValueError(f"series: {len(losses)} losses, {len(norms)} grad_norms and {len(lrs)} lrs")
    return tuple(SeriesRow(start + every * i, loss, norm, rate, optimizer)
                 for i, (loss, norm, rate) in enumerate(zip(losses, norms, lrs)))


def loss_probe(*, site: int = 0, op: str = "cross_entropy", expects: str = "logits", module: str | None = None,
               source: Source | None = None, input_node: str | None = None, input_site: int | None = None,
               input_shape: tuple[int, ...] = (32, 10), target_shape: tuple[int, ...] | None = (32,),
               target_dtype: str | None = "int64", low: float | None = None, high: float | None = None,
               target_integral: bool | None = None, failed: str | None = None, detail: dict | None = None,
               target_low: float | None = None, target_high: float | None = None,
               start: dict | None = None) -> LossStats:
    """One loss call; by default cross_entropy on [32, 10] logits with int64 class targets."""
    return LossStats(site, op, expects, module, source, input_node, input_site, tuple(input_shape),
                     None if target_shape is None else tuple(target_shape), target_dtype, low, high, target_integral,
                     failed, dict(detail or {}), target_low, target_high, dict(start or {}))


def input_stats(*, site: int = 0, op: str = "linear", module: str | None = "fc", source: Source | None = None,
                samples: int = 640, mean: Sequence[float] = (0.0,), std: Sequence[float] = (1.0,),
                made_source: Source | None = None) -> InputStats:
    """Raw data entering the layer op at `site`: per-feature mean and std."""
    return InputStats(site, op, module, source, samples, tuple(mean), tuple(std), made_source)


def weight(*, site: int = 0, module: str | None = "fc", param: str = "weight", kind: str = "linear",
           shape: tuple[int, ...] = (8, 8), fan_in: int | None = None, fan_out: int | None = None,
           std: float | None = None, rows_identical: bool = False, init_source: Source | None = None) -> WeightStats:
    """A layer weight at initialisation: fan_in and fan_out default to shape[1] and shape[0],
    std to sqrt(1 / fan_in) (fan-in scaled for no nonlinearity)."""
    fan_in = shape[1] if fan_in is None else fan_in
    fan_out = shape[0] if fan_out is None else fan_out
    return WeightStats(site, module, param, kind, tuple(shape), fan_in, fan_out,
                       (1.0 / fan_in) ** 0.5 if std is None else std, rows_identical, init_source)


def recurrence(*, module: str | None = "rnn", param: str = "weight_hh_l0", kind: str = "rnn_tanh",
               gated: bool | None = None, spectral_radius: float = 1.0, profile: Sequence[float] | None = None,
               op: OpStats | None = None, init_source: Source | None = None) -> RecurrenceStats:
    """A recurrent weight; gated defaults to whether kind is "lstm" or "gru"."""
    return RecurrenceStats(module, param, kind, kind in ("lstm", "gru") if gated is None else gated,
                           spectral_radius, None if profile is None else tuple(profile), op, init_source)


def nonfinite(*, phase: str = "forward", step: int = 0, op: OpStats | None = None, value: str = "nan",
              rank: int | None = None) -> NonFinite:
    """The first NaN/Inf of one phase; op defaults to `op()`."""
    return NonFinite(phase, step, _op() if op is None else op, value, rank)


def cut(*, kind: str = "detach", producer: tuple[str | None, ...] = ("fc",), module: str | None = None,
        source: Source | None = None, step: int = 0) -> Cut:
    """A tensor leaving the graph: kind is "detach", "data", "numpy", "item", "tolist", "no_grad",
    "nondiff:<op>" or "leaf_loss"; producer names the modules that made it, nearest first."""
    return Cut(kind, tuple(producer), module, source, step)


def function(*, name: str = "MyFunction", module: str | None = None, source: Source | None = None,
             checked: bool = True, note: str = "float64", wrong: Sequence[dict] = (),
             backward_source: Source | None = None,
             gradient_sources: Sequence[Source | None] = ()) -> FunctionStats:
    """A custom autograd.Function; wrong holds, per wrong input, a dict with "input",
    "relative_error", "analytic" and "numeric"."""
    return FunctionStats(name, module, source, checked, note, tuple(wrong), backward_source, tuple(gradient_sources))


def cast(*, kind: str = "autocast", dtype: str = "float16", source: Source | None = None,
         target: str = "cpu") -> CastStats:
    """Where low precision was chosen: kind "autocast" (target: the device) or "module"
    (target: the module's class name)."""
    return CastStats(kind, dtype, source, target)


def batch_mixing(*, model: str = "Net", judged: bool = True, mixed: bool = True, batch: int = 8, row: int = 7,
                 reached: int = 3, op: str | None = "view", module: str | None = "Net",
                 source: Source | None = None, dim: int | None = 1, shape: tuple[int, ...] | None = (5, 8, 3),
                 time_major: bool = False, by_design: str | None = None,
                 batchnorm_eval: tuple[str, ...] = ()) -> BatchMixingStats:
    """LK306's probe of one model: by default one that mixes, starting at a `view`."""
    return BatchMixingStats(model, judged, mixed, "", "input 0", batch, row, reached, 1, op, module, source, dim,
                            shape, time_major, by_design, batchnorm_eval)


__all__ = ["assert_gradient_flow", "stats", "source", "op", "activation", "param", "optimizer", "scheduler",
           "series", "loss_probe", "input_stats", "weight", "recurrence", "nonfinite", "cut", "function", "cast",
           "batch_mixing", "Severity"]
