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

A new leaf the script built with requires_grad=True (`torch.tensor(out.detach().numpy(),
requires_grad=True)`, `torch.tensor([model(x).item() ...], requires_grad=True)`) that a
loss reached and no optimizer trains is where the graph restarts: backward() runs, and
no parameter is behind it. It explains the parameters behind the cuts on its line, or,
when no trainable parameter got a gradient at all, every one: its line is the finding's
source and its cause (the line to change), with the earlier cut its values came from
named in the message.

One line to change, one story: the findings whose cause is the same line (a `.detach()` in
a transformer Block's forward, which starves the attention and the LayerNorm before it in
every block) are told under the module nearest the cut, whose evidence names every
parameter that line starves (`cut_parameters`) and the findings told under it (`explains`).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from leaky import ops
from leaky.checks import register
from leaky.checks._optim import cleared_before_step
from leaky.config import AuditConfig
from leaky.finding import Cause, Finding, Severity
from leaky.numbers import line_of
from leaky.stats import AuditStats, Cut

_ORDER = tuple(ops.calls.CUT_KINDS)   # the kinds of cut, most specific first
_SHOWN = 6                            # modules a story's root names in its message; the JSON names all


@register("LK108", "no-gradient-path", "trainable parameters that receive no gradient")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    if stats.steps == 0:
        return []
    cut_off: dict[str | None, list] = defaultdict(list)
    trained_roots = {p.root for p in stats.params if p.grad_steps}
    none_trained = not any(p.grad_steps for p in stats.params if p.requires_grad)
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
    cuts = {module: _find_cut(module, stats, none_trained, _optimizers(params)) for module, params in cut_off.items()}
    # NOTE: a cut without its tensor's graph (no_grad, a rebuilt leaf) names the few modules
    # nearest it: the first layers of a deep model starved by it are behind the cut found for
    # its later ones. A cut that kept its graph names every module behind it, and a module it
    # does not name (never called, an unused branch) is starved by something else.
    of_root: dict = {}
    for module, params in cut_off.items():
        if cuts[module] is not None and cuts[module].reaches is None:
            of_root.setdefault(params[0].root, cuts[module])
    told = [(_finding(module, params, stats, cut), cut) for module, params in cut_off.items()
            for cut in [cuts[module] or of_root.get(params[0].root)]]
    return [f for group in _by_line(told).values() for f in _one_story(group, stats)]


def _by_line(told: list[tuple[Finding, Cut | None]]) -> dict:
    """The findings grouped by the line to change (their cause); one without a line alone."""
    groups: dict = defaultdict(list)
    for finding, cut in told:
        cause = finding.cause
        groups[(cause.file, cause.line) if cause is not None else id(finding)].append((finding, cut))
    return groups


def _one_story(group: list[tuple[Finding, Cut | None]], stats: AuditStats) -> list[Finding]:
    """One cut, one story: of the findings whose path one line cuts (a `.detach()` in a
    transformer Block's forward starves the attention and the LayerNorm before it, in every
    block), the module nearest the cut is the root, and names every parameter the cut
    starves; the others are told under it (evidence `explains`, leaky/story.py)."""
    if len(group) == 1:
        return [group[0][0]]
    order = {p.module: i for i, p in reversed(list(enumerate(stats.params)))}

    def nearness(told: tuple[Finding, Cut | None]) -> tuple:
        finding, cut = told
        producers = list(cut.producer) if cut is not None else []
        near = producers.index(finding.module) if finding.module in producers else len(producers)
        return near, order.get(finding.module, len(order))

    root = min(group, key=nearness)[0]
    rest = sorted((f for f, _ in group if f is not root), key=lambda f: order.get(f.module, len(order)))
    names = [name for f in (root, *rest) for name in f.evidence["parameters"]]
    values = sum(f.evidence["values"] for f in (root, *rest))
    modules = [f.module for f in rest]
    shown = ", ".join(modules[:_SHOWN]) + (f" and {len(modules) - _SHOWN} more" if len(modules) > _SHOWN else "")
    line = line_of(root.cause.source)
    more = (f" The same line ({line}) starves {len(modules)} more module{'s' if len(modules) != 1 else ''}, "
            f"told under this one: {shown} ({len(names)} parameters, {values} values in all).")
    evidence = {**root.evidence, "explains": [{"code": f.code, "module": f.module} for f in rest],
                "cut_parameters": names, "cut_values": values}
    under = [replace(f, message=f"{f.message} The same line cuts {root.module}'s path too (told there): one change for both.",
                     evidence={**f.evidence, "same_cut_as": root.module}) for f in rest]
    return [replace(root, message=root.message + more, evidence=evidence), *under]


def _optimizers(params) -> frozenset:
    return frozenset(p.optimizer for p in params if p.optimizer is not None)


def _related(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _kind(cut: Cut) -> str:
    return cut.kind.split(":")[0]


def _find_cut(module: str | None, stats: AuditStats, none_trained: bool = False,
              optimizers: frozenset = frozenset()) -> Cut | None:
    """The cut that takes `module`'s output off the loss's path; `optimizers`: those that hold
    its starved parameters."""
    def related(cut: Cut) -> bool:
        if _kind(cut) == ops.calls.LEAF:
            return True   # nothing before the loss gets a gradient
        if _kind(cut) == ops.calls.REBUILT and not cut.producer:
            return none_trained   # built from values whose origin is not known: the loss reached nothing else
        if cut.kind == ops.calls.NO_GRAD:
            return _related(cut.module, module)
        if cut.reaches is not None:   # the cut tensor's whole graph: its parameters feed it, or not
            return module in cut.reaches and cut.site not in backward_ran
        return any(_related(producer, module) for producer in cut.producer)

    # NOTE: a cut of a tensor whose own backward ran (`losses.append(loss.detach())`) left its
    # parameters a path to the loss: whatever starves them, it is not that cut
    backward_ran = {op.site for op in stats.ops if op.steps}
    candidates = [c for c in stats.cuts if related(c)]
    # NOTE: of two cuts of the same output (a GAN's fake images, detached for the
    # discriminator's step on purpose and, by mistake, for the generator's too), the one
    # made in a step that the parameters' own optimizer ended is the one that starves them.
    # Of two cuts a module feeds, the later one in forward: the embedding feeds a Block's
    # `self.attn(self.ln_1(x)).detach()` and, through the residual, a `.detach()` of the next
    # block's input; the first alone leaves it a path to the loss, the second takes that away.
    stepped_by = {row.step: row.optimizer for row in stats.series}
    candidates.sort(key=lambda c: (_ORDER.index(_kind(c)), stepped_by.get(c.step, -1) not in optimizers,
                                   _later_first(c), -(module in c.producer)))
    return candidates[0] if candidates else None


def _later_first(cut: Cut) -> tuple:
    return (-cut.step, -cut.order) if cut.order is not None else (0, 0)


def _cleared(module: str | None, stats: AuditStats) -> bool:
    """backward() sent gradients toward this module's parameters, yet .grad was None at
    every step: something cleared them in between (zero_grad between backward and step)."""
    return any(op.module == module and op.grad_param for op in stats.ops)


def _rebuilt(cut: Cut, module: str | None, stats: AuditStats) -> tuple[str, Cause | None]:
    """The message's account of a rebuilt leaf (the prediction or inputs, and the nearest
    earlier cut on the lines before it that its values may come from), and the cause: its line."""
    prediction = cut.kind.endswith(":prediction")
    role = "the prediction" if prediction else "inputs"
    earlier = [c for c in stats.cuts if _kind(c) in (ops.calls.DETACH, ops.calls.DATA, ops.calls.NUMPY,
                                                     ops.calls.ITEM, ops.calls.TOLIST)
               and c.source is not None and cut.source is not None and c.source.file == cut.source.file
               and c.source.line < cut.source.line and any(_related(p, module) for p in c.producer)]
    origin = ""
    if earlier:
        nearest = max(earlier, key=lambda c: c.source.line)
        origin = f" (taken out of the graph by {ops.calls.cut_kind(nearest.kind).what} at line {nearest.source.line})"
    what = (f"{role}, rebuilt here as a new tensor with requires_grad=True from detached values{origin}: "
            "no parameter is behind it")
    label = "the prediction rebuilt from detached values here" if prediction else "inputs built here"
    return what, Cause.at(cut.source, label)


def _finding(module: str | None, params, stats: AuditStats, cut: Cut | None) -> Finding:
    names = ", ".join(p.name for p in params)
    count = sum(_numel(p.shape) for p in params)
    cause = None
    head = f"{names} ({count} values, trainable) received no gradient {_steps_checked(stats)}"
    if cut is not None:
        kind = ops.calls.cut_kind(cut.kind)
        what, fix = kind.what, kind.fix
        if _kind(cut) == ops.calls.NONDIFF:
            what = f"{cut.kind.split(':')[1]}, whose output has no gradient"
        if _kind(cut) == ops.calls.REBUILT:
            what, cause = _rebuilt(cut, module, stats)
        else:
            cause = Cause.at(cut.source, f"the gradient path cut here by {what}")
        message = f"{head}: the path to the loss is cut by {what} here."
        if _kind(cut) == ops.calls.REBUILT and cause is not None:
            message = f"{head}: the loss reaches {what}."
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
                "cut": None if cut is None else cut.kind, "checked_steps": stats.steps, "steps_run": _steps_run(stats)}
    return Finding("no-gradient-path", "LK108", Severity.ERROR, message, fix, module, op, source, None,
                   evidence, cause=cause)


def _steps_run(stats: AuditStats) -> int:
    """Every step the run took (the report's 'N steps observed'), sampled in detail or not."""
    return max(stats.steps, len(stats.series))


def _steps_checked(stats: AuditStats) -> str:
    """The steps whose .grad was read parameter by parameter: the sampled ones (a watch reads
    one in `every`), which can be fewer than the steps the run took."""
    checked, run = stats.steps, _steps_run(stats)
    if run > checked:
        return (f"in {'the 1 step' if checked == 1 else f'any of the {checked} steps'} leaky checked parameter "
                f"by parameter (of {run} that ran)")
    return "in the 1 observed step" if checked == 1 else f"in any of the {checked} observed steps"


def _numel(shape) -> int:
    total = 1
    for size in shape:
        total *= size
    return total
