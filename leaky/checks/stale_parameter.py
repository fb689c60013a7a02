"""LK201 stale-parameter: a parameter gets a gradient, but the optimizer never changes it.

An optimizer updates only the parameters in its param groups, and with lr = 0 (or a
scheduler that drove it there) not even those: w_{t+1} = w_t - lr * step(g_t) = w_t.
The gradient is computed, the loss cannot learn from it. leaky compares each parameter
before and after every sampled optimizer step, and knows which parameters each optimizer
holds. Frozen parameters (requires_grad=False) receive no gradient and are not findings.
"""
from __future__ import annotations

from collections import defaultdict

from leaky.checks import register
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats, ParamStats

_MIN_STEPS = 2


@register("LK201", "stale-parameter", "gets a gradient, but the optimizer never changes it")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    if stats.idle_optimizer:
        return [_idle(stats)]
    if not stats.used_optimizer:
        return []
    orphans: dict[str | None, list[ParamStats]] = defaultdict(list)
    unchanged: dict[str | None, list[ParamStats]] = defaultdict(list)
    for param in stats.params:
        if not param.requires_grad or not param.grad_steps or not param.grad_norm:
            continue
        if not param.in_optimizer:
            orphans[param.module].append(param)
        elif param.graded_update_steps >= _MIN_STEPS and param.zero_update_steps == param.graded_update_steps:
            unchanged[param.module].append(param)
    findings = [_orphan(module, params, stats) for module, params in orphans.items()]
    findings += [_unchanged(module, params) for module, params in unchanged.items()]
    return findings


def _idle(stats: AuditStats) -> Finding:
    graded = [p for p in stats.params if p.grad_steps]
    modules = sorted({p.module for p in graded if p.module})
    message = (f"backward() ran {stats.backward_calls} times and an optimizer holds the parameters that got "
               f"gradients ({', '.join(modules[:4]) or 'the model'}), but optimizer.step() never ran, so no "
               "weight ever changed.")
    fix = ("Call optimizer.step() after loss.backward() — with the parentheses: `optimizer.step` alone "
           "only names the method.")
    return Finding("stale-parameter", "LK201", Severity.ERROR, message, fix, None, None, None, None,
                   {"cause": "optimizer never stepped", "backward_calls": stats.backward_calls,
                    "modules": modules})


def _names(params) -> str:
    return ", ".join(p.name for p in params)


def _orphan(module, params, stats: AuditStats) -> Finding:
    message = (f"{_names(params)} receive gradients (last norm {params[0].grad_norm:.3g}) but are in no "
               "optimizer's param groups, so no step ever changes them: typically a layer replaced or "
               "added after the optimizer was built.")
    fix = ("Build the optimizer after the model is final, or add the group: "
           f"optimizer.add_param_group({{'params': model.{module}.parameters()}})" if module else
           "Build the optimizer after the model is final, or add the missing parameters with "
           "optimizer.add_param_group(...).")
    return Finding("stale-parameter", "LK201", Severity.ERROR, message, fix, module, None, None, None,
                   {"parameters": [p.name for p in params], "cause": "not in any optimizer"})


def _unchanged(module, params) -> Finding:
    steps = params[0].graded_update_steps
    grad = max(p.grad_norm or 0.0 for p in params)
    message = (f"{_names(params)} are in the optimizer and received a nonzero gradient (norm up to "
               f"{grad:.2g}) in each of {steps} sampled steps, yet optimizer.step() left them exactly "
               "unchanged: w_new = w - lr·step(g) = w means their group's lr is 0 (or a scheduler set it "
               "there), or lr·g is so small it rounds away next to the weight (below ~6e-8 of it in "
               "float32) — a vanishing gradient does that (see LK103 if reported).")
    fix = ("Check the learning rate of their param group (optimizer.param_groups[i]['lr']) and the "
           "scheduler; freeze on purpose with requires_grad_(False) instead of lr = 0.")
    return Finding("stale-parameter", "LK201", Severity.ERROR, message, fix, module, None, None, None,
                   {"parameters": [p.name for p in params], "cause": "unchanged by the optimizer",
                    "steps": steps})
