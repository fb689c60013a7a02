"""LK108 no-gradient-path: trainable parameters that never receive a gradient.

A parameter's .grad stays None when no differentiable path connects it to the loss:
`.detach()`, `.data`, a numpy round trip, a `torch.no_grad()` block, or a branch whose
output is never used. Trainable means requires_grad=True and, when an optimizer ran, in one
of its param groups: a frozen backbone and a detached target network are not findings.
Without an optimizer (parameters updated by hand), a model none of whose parameters got a
gradient and that ran only under no_grad is only evaluated (the best checkpoint reloaded
for testing, a target network): not a finding.
Gradients that backward() computed and a zero_grad() cleared before the step are not a
cut path: that is LK201 stale-parameter.
"""
from __future__ import annotations

from collections import defaultdict

from leaky import ops
from leaky.checks import register
from leaky.checks._optim import cleared_before_step
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats, Cut

_ORDER = tuple(ops.calls.CUT_KINDS)   # the kinds of cut, most specific first


@register("LK108", "no-gradient-path", "trainable parameters that receive no gradient")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    if stats.steps == 0:
        return []
    cut_off: dict[str | None, list] = defaultdict(list)
    trained_roots = {p.root for p in stats.params if p.grad_steps}
    for param in stats.params:
        if not param.requires_grad or param.grad_steps > 0:
            continue
        if stats.used_optimizer and not param.in_optimizer:
            continue
        if cleared_before_step(stats, param):
            continue   # LK201: backward() computed it, a zero_grad() before the step cleared it
        if param.module is None:
            continue   # not part of any model that ran (e.g. a replaced layer still in the optimizer)
        if not stats.used_optimizer and param.root not in trained_roots and param.module not in stats.modules_ran:
            continue   # only evaluated, under no_grad, in a model none of whose parameters got a gradient
        cut_off[param.module].append(param)
    return [_finding(module, params, stats) for module, params in cut_off.items()]


def _related(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _kind(cut: Cut) -> str:
    return cut.kind.split(":")[0]


def _find_cut(module: str | None, stats: AuditStats) -> Cut | None:
    def related(cut: Cut) -> bool:
        if _kind(cut) == ops.calls.LEAF:
            return True   # nothing before the loss gets a gradient
        if cut.kind == ops.calls.NO_GRAD:
            return _related(cut.module, module)
        return any(_related(producer, module) for producer in cut.producer)

    candidates = [c for c in stats.cuts if related(c)]
    candidates.sort(key=lambda c: (_ORDER.index(_kind(c)), -(module in c.producer)))
    return candidates[0] if candidates else None


def _cleared(module: str | None, stats: AuditStats) -> bool:
    """backward() sent gradients toward this module's parameters, yet .grad was None at
    every step: something cleared them in between (zero_grad between backward and step)."""
    return any(op.module == module and op.grad_param for op in stats.ops)


def _finding(module: str | None, params, stats: AuditStats) -> Finding:
    names = ", ".join(p.name for p in params)
    count = sum(_numel(p.shape) for p in params)
    cut = _find_cut(module, stats)
    head = (f"{names} ({count} values, trainable) received no gradient in any of the "
            f"{stats.steps} observed steps")
    if cut is not None:
        kind = ops.calls.cut_kind(cut.kind)
        what, fix = kind.what, kind.fix
        if _kind(cut) == ops.calls.NONDIFF:
            what = f"{cut.kind.split(':')[1]}, whose output has no gradient"
        message = f"{head}: the path to the loss is cut by {what} here."
        source, op = cut.source, cut.kind
    elif _cleared(module, stats):
        message = (f"{head}: backward() did compute gradients for them, but .grad was empty again when "
                   "optimizer.step() ran, so something cleared it in between.")
        fix = ("Call optimizer.zero_grad() before loss.backward() (or after optimizer.step()), never between "
               "backward() and step().")
        source, op = None, "cleared"
    elif module in stats.compiled_modules:
        message = (f"{head}: {module} is inside torch.compile'd code, whose ops leaky does not see, so it cannot "
                   "tell where the path to the loss is cut (a .detach(), .data, no_grad, an output never used).")
        fix = ("Run once with TORCH_COMPILE_DISABLE=1: leaky then sees these ops and names the line that cuts "
               "the path.")
        source, op = None, None
    elif module in stats.modules_ran:
        message = f"{head}: {module} runs in forward, but its output never reaches the loss (an unused branch)."
        fix = "Use this module's output in the loss, or remove it (and its parameters) from the optimizer."
        source, op = None, None
    else:
        message = f"{head}: {module or 'their module'} is never called in the forward pass."
        fix = "Call the module in forward(), or remove its parameters from the optimizer."
        source, op = None, None
    evidence = {"parameters": [p.name for p in params], "values": count,
                "cut": None if cut is None else cut.kind}
    return Finding("no-gradient-path", "LK108", Severity.ERROR, message, fix, module, op, source, None,
                   evidence)


def _numel(shape) -> int:
    total = 1
    for size in shape:
        total *= size
    return total
