"""LK201 stale-parameter: a parameter gets a gradient, but the optimizer never changes it.

An optimizer updates only the parameters in its param groups, and with lr = 0 (or a
scheduler that drove it there) not even those: w_{t+1} = w_t - lr * step(g_t) = w_t.
The gradient is computed, the loss cannot learn from it; so it is when a zero_grad() call
clears .grad between backward() and step(). leaky compares each parameter before and after
every sampled optimizer step, knows which parameters each optimizer holds, and records
where each optimizer, scheduler, parameter and zero_grad() call was made, so the finding
points at the line to change. Frozen parameters (requires_grad=False) receive no gradient
and are not findings.
"""
from __future__ import annotations

from collections import defaultdict

from leaky.checks import register
from leaky.checks._optim import cleared_before_step, group_lrs, lr_origin, optimizer_of
from leaky.checks._util import line_of, listed, num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats, ParamStats


@register("LK201", "stale-parameter", "gets a gradient, but the optimizer never changes it")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    if stats.idle_optimizer:
        return [_idle(stats)]
    if not stats.used_optimizer:
        return []
    orphans: dict[str | None, list[ParamStats]] = defaultdict(list)
    unchanged: dict[str | None, list[ParamStats]] = defaultdict(list)
    cleared: dict[int, list[ParamStats]] = defaultdict(list)
    for param in stats.params:
        if not param.requires_grad:
            continue
        if cleared_before_step(stats, param):
            cleared[param.optimizer].append(param)
            continue
        if not param.grad_steps or not param.grad_norm:
            continue
        if not param.in_optimizer:
            # NOTE: on two steps at least: a watch's check pass can follow the first optimizer's
            # step of a step before a second optimizer (a decoder's) has stepped at all
            if param.grad_steps >= 2:
                orphans[param.module].append(param)
        elif (param.graded_update_steps >= config.stale_min_steps
              and param.zero_update_steps == param.graded_update_steps):
            unchanged[param.module].append(param)
    held = {name: idle for idle in stats.unstepped_optimizers for name in idle.params}
    findings = [_never_stepped(idle, [p for ps in orphans.values() for p in ps if held.get(p.name) is idle], stats)
                for idle in stats.unstepped_optimizers]
    findings = [f for f in findings if f is not None]
    orphans = {module: kept for module, params in orphans.items()
               if (kept := [p for p in params if p.name not in held])}
    findings += [_orphan(module, params, stats) for module, params in orphans.items()]
    findings += [_unchanged(module, params, stats, config) for module, params in unchanged.items()]
    findings += [_cleared(index, params, stats) for index, params in cleared.items()]
    return findings



def _idle(stats: AuditStats) -> Finding:
    graded = [p for p in stats.params if p.grad_steps]
    modules = sorted({p.module for p in graded if p.module})
    message = (f"backward() ran {stats.backward_calls} times and an optimizer holds the parameters that got "
               f"gradients ({listed(modules, 4) or 'the model'}), but optimizer.step() never ran, so no "
               "weight ever changed.")
    fix = ("Call optimizer.step() after loss.backward() — with the parentheses: `optimizer.step` alone "
           "only names the method.")
    if stats.idle_source is not None:
        message += f" {line_of(stats.idle_source)} names the method without calling it."
    return Finding("stale-parameter", "LK201", Severity.ERROR, message, fix, None, None, stats.idle_source, None,
                   {"cause": "optimizer never stepped", "backward_calls": stats.backward_calls,
                    "modules": modules})


def _names(params) -> str:
    return ", ".join(p.name for p in params)


def _never_stepped(idle, params: list[ParamStats], stats: AuditStats) -> Finding | None:
    """Parameters held by an optimizer that was built and never stepped: one finding for
    that optimizer, at the line that built it, named as the script names it."""
    if not params:
        return None
    name = f"`{idle.name}`" if idle.name else f"the {idle.kind} optimizer"
    where = f" built at {line_of(idle.source)}" if idle.source else ""
    modules = sorted({p.module for p in params if p.module})
    shown = listed(modules, 6) if modules else listed((p.name for p in params), 6)
    message = (f"the parameters of {shown} ({len(params)} tensors, last gradient norm up to "
               f"{max(p.grad_norm or 0.0 for p in params):.3g}) receive gradients, but the only optimizer that "
               f"holds them is {name} ({idle.kind}){where}, and its step() is never called, so no step changes "
               "them.")
    stepped = [o for o in stats.optimizers if o.step_source is not None]
    call = f"{idle.name}.step()" if idle.name else "its step()"
    if stepped:
        other = stepped[0]
        beside = f"{other.name}.step()" if other.name else f"the {other.kind}'s step()"
        fix = f"Call {call} after loss.backward(), where {beside} is called ({line_of(other.step_source)})."
    else:
        fix = f"Call {call} after loss.backward()."
    return Finding("stale-parameter", "LK201", Severity.ERROR, message, fix,
                   modules[0] if len(modules) == 1 else _common(modules), None, idle.source, None,
                   {"parameters": [p.name for p in params], "modules": modules,
                    "cause": "optimizer never stepped", "optimizer": idle.name or idle.kind})


def _common(modules: list[str]) -> str | None:
    """The module all these modules sit in (`decoder` for decoder.gru and decoder.out)."""
    parts = [m.split(".") for m in modules]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common) or None


def _orphan(module, params, stats: AuditStats) -> Finding:
    message = (f"{_names(params)} receive gradients (last norm {params[0].grad_norm:.3g}) but are in no "
               "optimizer's param groups, so no step ever changes them: typically a layer replaced or "
               "added after the optimizer was built.")
    built = stats.optimizers[0].source if len(stats.optimizers) == 1 else None
    late = next((p for p in params if p.created_after_optimizer and p.source is not None), None)
    if late is not None:
        source = late.source
        message += (f" {late.name} was created at {line_of(late.source)}, after the optimizer was built"
                    + (f" ({line_of(built)})." if built else "."))
    else:
        source = built
        if built is not None:
            message += f" The optimizer built at {line_of(built)} was not given them."
    holder = stats.optimizers[0].name if len(stats.optimizers) == 1 and stats.optimizers[0].name else "optimizer"
    root = params[0].root
    # NOTE: with several models, module names start with the variable that holds each one
    # (`decoder.gru`); with one, they start below the model, whose variable is not known here
    path = module if root and (module == root or str(module).startswith(root + ".")) else f"model.{module}"
    fix = ("Build the optimizer after the model is final, or add the group: "
           f"{holder}.add_param_group({{'params': {path}.parameters()}})" if module else
           "Build the optimizer after the model is final, or add the missing parameters with "
           "optimizer.add_param_group(...).")
    return Finding("stale-parameter", "LK201", Severity.ERROR, message, fix, module, None, source, None,
                   {"parameters": [p.name for p in params], "cause": "not in any optimizer"})


def _unchanged(module, params, stats: AuditStats, config: AuditConfig) -> Finding:
    steps = params[0].graded_update_steps
    grad = max(p.grad_norm or 0.0 for p in params)
    optimizer = optimizer_of(stats, params[0])
    _, seen = group_lrs(optimizer, params[0].group) if optimizer is not None else (None, None)
    source, origin = None, ""
    if seen is not None and seen[1] == 0:
        why = "their group's lr was 0 in every sampled step."
        source, origin = lr_origin(stats, params[0], "zero", config)
    elif seen is not None:
        why = (f"their group's lr was {num(seen[1])}, so lr·step(g) is so small it rounds away next to the "
               "weight (below ~6e-8 of it in float32): a scheduler that shrank the rate, or a vanishing "
               "gradient (see LK103 if reported), does that.")
        # NOTE: only a scheduler that shrank the rate is a clear origin here; with the rate as
        # constructed, a vanishing gradient is as likely, and LK103 locates that.
        source, origin = lr_origin(stats, params[0], "low", config, scheduler_only=True)
    else:
        why = ("their group's lr is 0 (or a scheduler set it there), or lr·g is so small it rounds away next "
               "to the weight (below ~6e-8 of it in float32) — a vanishing gradient does that (see LK103 if "
               "reported).")
    message = (f"{_names(params)} are in the optimizer and received a nonzero gradient (norm up to "
               f"{grad:.2g}) in each of {steps} sampled steps, yet optimizer.step() left them exactly "
               f"unchanged: w_new = w - lr·step(g) = w because {why}{origin}")
    fix = ("Check the learning rate of their param group (optimizer.param_groups[i]['lr']) and the "
           "scheduler; freeze on purpose with requires_grad_(False) instead of lr = 0.")
    return Finding("stale-parameter", "LK201", Severity.ERROR, message, fix, module, None, source, None,
                   {"parameters": [p.name for p in params], "cause": "unchanged by the optimizer",
                    "steps": steps, "lr_range": list(seen) if seen else None})


def _cleared(index: int, params, stats: AuditStats) -> Finding:
    optimizer = stats.optimizers[index]
    modules = sorted({p.module for p in params if p.module})
    where = f" at {line_of(optimizer.cleared_source)}" if optimizer.cleared_source else ""
    message = (f"{listed((p.name for p in params), 6)} get gradients from backward(), "
               f"but a zero_grad(){where} clears them between backward() and {optimizer.kind}.step() "
               f"(in {optimizer.cleared_steps} observed steps), so the step finds no gradient and changes "
               "nothing.")
    fix = ("Call zero_grad() before loss.backward() (or right after optimizer.step()), never between "
           "backward() and step().")
    return Finding("stale-parameter", "LK201", Severity.ERROR, message, fix,
                   modules[0] if len(modules) == 1 else None, None, optimizer.cleared_source, None,
                   {"parameters": [p.name for p in params], "modules": modules,
                    "cause": "gradients cleared before the step", "steps": optimizer.cleared_steps})
