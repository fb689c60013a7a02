"""From findings to candidate fixes: one remedy per check code, in a registry.

A remedy reads a finding (and the audit's statistics) and proposes zero or more
`Candidate`s. Candidates with the same key are one experiment: the three dead ReLU layers
of one network become one "LeakyReLU at act1, act2, act3" run, and a re-initialisation
proposed by both saturated-activation and bad-initialization is run once.
Only mechanical remedies are here; a finding without one is listed, not guessed at.
"""
from __future__ import annotations

import ast
import os
import statistics
from dataclasses import dataclass, field
from typing import Callable

import torch.nn.functional as F

from leaky import ops
from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.change import Change
from leaky.stats import AuditStats
from leaky.story import told_under


@dataclass
class Context:
    """What the remedies may read about the unfixed run."""

    stats: AuditStats
    findings: list[Finding]
    backward_site: tuple[str, int] | None = None   # where loss.backward() was called
    root: str | None = None                        # the variable holding the model, if one
    module_types: dict[str, str] = field(default_factory=dict)          # path -> class name
    construction: dict[str, tuple[str, int]] = field(default_factory=dict)  # path -> where built
    why_not: dict[int, str] = field(default_factory=dict)   # id(finding) -> why it has no mechanical fix

    def no_fix(self, finding: Finding, why: str) -> list:
        """No candidate for `finding`, and why (`leaky fix` says it)."""
        self.why_not[id(finding)] = why
        return []

    def grad_norms(self) -> list[float]:
        return [row[2] for row in self.stats.series if row[2] is not None and row[2] == row[2]
                and row[2] != float("inf")]


@dataclass
class Candidate:
    key: tuple
    what: str                                   # "LeakyReLU(0.01) in place of ReLU"
    findings: list[Finding]
    parts: list[Callable[[], object]]           # each makes one run-time primitive
    places: list[str] = field(default_factory=list)
    changes: list[Callable[[], Change | None]] = field(default_factory=list)
    changes_loss: bool = False                  # the loss itself is computed differently
    note: str = ""                              # how a measured value was chosen

    @property
    def title(self) -> str:
        return f"{self.what} at {', '.join(self.places)}" if self.places else self.what

    def build(self) -> rt.Fix:
        return rt.Fix(*(make() for make in self.parts))

    def change(self) -> Change | None:
        """One diff when every part has one at a known line, else snippets."""
        made = [make() for make in self.changes]
        if not made or any(c is None for c in made):
            return None
        if all(c.kind == "diff" for c in made) and len(made) == 1:
            return made[0]
        return Change("snippet" if any(c.kind == "snippet" for c in made) else "diff",
                      "\n".join(c.text for c in made))


REMEDIES: dict[str, Callable[[Finding, Context], list[Candidate]]] = {}


def remedy(code: str):
    def register(function):
        REMEDIES[code] = function
        return function
    return register


def propose(findings: list[Finding], context: Context) -> list[Candidate]:
    """Candidates for every finding at warning or error, merged by key, in finding order.

    A finding that another explains (leaky/story.py: it is told under that one) is not fixed
    on its own terms: its own advice can contradict the cause (a higher rate for the weights a
    vanishing gradient starves). The fixes of the finding it is told under are its fixes, and
    its headline is measured under them, as under any fix of its own that another finding
    proposes anyway; its other fixes are not tried.
    """
    parent = told_under(findings)
    merged: dict[tuple, Candidate] = {}
    own: dict[int, list[Candidate]] = {}

    def own_fixes(finding: Finding) -> list[Candidate]:
        if id(finding) not in own:
            remedy_of = REMEDIES.get(finding.code)
            own[id(finding)] = [_merge(merged, c, finding) for c in (remedy_of(finding, context) if remedy_of else [])]
        return own[id(finding)]

    def fixes_of(finding: Finding) -> list[Candidate]:
        root = parent.get(id(finding))
        if root is None:
            return own_fixes(finding)
        fixes = list(fixes_of(root))
        remedy_of = REMEDIES.get(finding.code)
        for candidate in remedy_of(finding, context) if remedy_of else []:
            known = merged.get(candidate.key)
            if known is not None and known not in fixes:
                fixes.append(known)
        return fixes

    serious = [f for f in findings if f.severity.value != "info"]
    for finding in serious:
        if id(finding) not in parent:
            own_fixes(finding)
    for finding in serious:
        root = parent.get(id(finding))
        if root is None:
            continue
        fixes = fixes_of(finding)
        for candidate in fixes:
            if not any(f is finding for f in candidate.findings):
                candidate.findings.append(finding)
        if not fixes:
            why = context.why_not.get(id(root))
            context.why_not[id(finding)] = (f"it follows from {root.code} {root.name}, which has no mechanical fix"
                                            + (f" ({why})" if why else ""))
    return list(merged.values())


def _merge(merged: dict[tuple, Candidate], candidate: Candidate, finding: Finding) -> Candidate:
    """`candidate` as one experiment with any of the same key: places added to the known one."""
    known = merged.get(candidate.key)
    if known is None:
        merged[candidate.key] = candidate
        return candidate
    if not any(f is finding for f in known.findings):
        known.findings.append(finding)
    for place, part, made in zip(candidate.places, candidate.parts, candidate.changes):
        if place not in known.places:
            known.places.append(place)
            known.parts.append(part)
            known.changes.append(made)
    return known


def without_remedy(findings: list[Finding], candidates: list[Candidate]) -> list[Finding]:
    covered = {id(f) for c in candidates for f in c.findings}
    return [f for f in findings if f.severity.value != "info" and id(f) not in covered]


def short_place(source) -> str:
    rel = os.path.relpath(source.file)
    return f"{source.file if rel.startswith('..') else rel}:{source.line}"


def _param(path: str, name: str, context: Context) -> str:
    prefix = f"{context.root}." if context.root else "model."
    return f"{prefix}{path}.{name}" if path else f"{prefix}{name}"


# -- dead-zone: a straight-through estimator at the line ---------------------------------
def straight_through_ops(op: str) -> tuple[frozenset[str], bool] | None:
    """(the spellings replaced at the line, whether it is a clamp) for an op `leaky fix` can
    pass the gradient straight through (ops: replacement ops.STRAIGHT_THROUGH); not in place."""
    rule = ops.rule(op)
    if rule is None or rule.replacement != ops.STRAIGHT_THROUGH or op.endswith("_"):
        return None
    clamping = rule.zero is not None and rule.zero.kind in (ops.dead_zones.CLAMP.kind, ops.activations.BOUNDED.kind)
    if not clamping:
        return frozenset({op}), False
    clamps = frozenset(s for r in ops.with_replacement(ops.STRAIGHT_THROUGH) if r.zero is not None
                       and r.zero.kind in (ops.dead_zones.CLAMP.kind, ops.activations.BOUNDED.kind)
                       for s in r.spellings if not s.endswith("_"))
    return clamps, True


@remedy("LK106")
def dead_zone(finding: Finding, context: Context) -> list[Candidate]:
    module = ops.module_rule(context.module_types.get(finding.module or ""))
    if module is not None and module.replacement == ops.STRAIGHT_THROUGH and module.zero is ops.activations.BOUNDED:
        path = finding.module
        what = f"straight-through {module.module} module (Huber's gradient)"

        def through(module):
            return lambda x: x + (F.hardtanh(x, module.min_val, module.max_val) - x).detach()
        return [Candidate(("ste", path), what, [finding], [lambda: rt.ModuleEdit([path], rt.swap_forward_of(through),
                                                                                  what)], [path],
                          [lambda: edits.snippet(f"# in place of the nn.{module.module} at {path}, in forward():\n"
                                                 "x = x + (F.hardtanh(x, lo, hi) - x).detach()")])]
    straight = straight_through_ops(finding.op) if finding.source is not None else None
    if straight is None:
        return []
    file, line = finding.source.file, finding.source.line
    names, clamp = straight
    what = "straight-through clamp (Huber's gradient)" if clamp else f"straight-through {finding.op}"
    note = ("the clamped value is kept and the gradient passes it unchanged; for a squared error that is "
            "exactly the gradient of F.smooth_l1_loss, clipped to the clamp's bounds instead of cut to 0"
            if clamp else "the value is kept; the gradient passes as if the op were the identity")

    def rewrite(source, node):
        x = edits.operand(source, node)
        call = ast.get_source_segment(source, node)
        if not x or not call:
            return None
        if x.isidentifier():
            return f"({x} + ({call} - {x}).detach())"
        # NOTE: an expression is computed once, into a name, not repeated (it may run a model).
        name = "unclamped" if clamp else f"un{finding.op}ed"
        raw = x[1:-1] if x.startswith("(") and x.endswith(")") else x
        return f"{name} = {raw}", f"({name} + ({call.replace(raw, name, 1)} - {name}).detach())"

    return [Candidate(("ste", file, line), what, [finding],
                      [lambda: rt.OpAtLine(file, line, set(names), rt.straight_through, ops.STRAIGHT_THROUGH)],
                      [short_place(finding.source)], [lambda: edits.rewrite_call(file, line, set(names), rewrite)],
                      note=note)]


# -- dead units --------------------------------------------------------------------------
@remedy("LK102")
def dead_units(finding: Finding, context: Context) -> list[Candidate]:
    candidates = []
    swap = _leaky_relu(finding, context)
    if swap is not None:
        candidates.append(swap)
    died = finding.evidence.get("died_during_observation", 0) or 0
    if died:
        candidates.extend(_lr(0.1, finding, context, "units were killed by updates"))
    if (finding.evidence.get("dead_units", 0) or 0) > died:
        layer = feeding_layer(context.stats, finding)
        activation = ops.activation(finding.op)
        if layer is not None and activation is not None:
            candidates.append(reinit(layer, activation.family, finding, context))
    return candidates


def _leaky_relu(finding: Finding, context: Context) -> Candidate | None:
    what = "LeakyReLU(0.01) in place of ReLU"
    (relu,) = ops.with_replacement(ops.LEAKY)
    kind = context.module_types.get(finding.module or "")
    module = ops.module_rule(kind)
    if finding.module and module is not None and module.extra.get("relu_like"):
        path = finding.module
        site = context.construction.get(path)

        def change():
            for where in lines_of(finding, site):
                made = edits.rewrite_call(where[0], where[1], {relu.module},
                                          lambda source, node: "nn.LeakyReLU(0.01)" if not node.args and not
                                          node.keywords else None)
                if made is not None:
                    return made
            return edits.snippet(f"replace nn.{relu.module}() by nn.LeakyReLU(0.01) for {path}")
        return Candidate(("leaky-relu",), what, [finding],
                         [lambda: rt.ModuleEdit([path], rt.swap_forward(lambda x: F.leaky_relu(x, 0.01)), what)],
                         [path], [change])
    if finding.source is None or finding.op != relu.name:
        return None
    file, line = finding.source.file, finding.source.line
    return Candidate(("leaky-relu",), what, [finding],
                     [lambda: rt.OpAtLine(file, line, set(relu.spellings), lambda f, a, k: F.leaky_relu(a[0], 0.01),
                                          what)],
                     [short_place(finding.source)],
                     [lambda: edits.rewrite_call(file, line, {relu.name}, lambda source, node:
                                                 f"torch.nn.functional.leaky_relu({edits.operand(source, node)}, 0.01)")])


def feeding_layer(stats: AuditStats, finding: Finding) -> str | None:
    """The module with weights whose output the activation of `finding` reads: the last
    weighted op before it in forward order."""
    weighted = {p.module for p in stats.params if p.name.endswith("weight") and p.module is not None}
    ordered = sorted(stats.ops, key=lambda op: op.first_seq)
    at = next((i for i, op in enumerate(ordered) if op.module == finding.module and op.op == finding.op), None)
    if at is None:
        return None
    return next((op.module for op in reversed(ordered[:at]) if op.module in weighted), None)


# -- initialisation ----------------------------------------------------------------------
def init_for(family: str | None) -> tuple[Callable, str]:
    """(the run-time init, how to write it with `w` for the weight) that a layer feeding the
    activation `family` wants (ops.init_for; None: what follows is linear)."""
    init_of = ops.init_for(family)
    if init_of.kaiming_gain:
        return rt.kaiming(init_of.gain), f"kaiming_normal_(w, nonlinearity='{init_of.gain}')"
    return rt.xavier(init_of.gain), f"xavier_normal_(w, gain=nn.init.calculate_gain('{init_of.gain}'))"


def reinit(layer: str, family: str | None, finding: Finding, context: Context) -> Candidate:
    """Re-initialise `layer` for the activation family that follows it (ops.init_for)."""
    init, text = init_for(family)
    weight, bias = _param(layer, "weight", context), _param(layer, "bias", context)
    return Candidate(("reinit", layer), f"re-initialise with {text.split('(')[0]}, bias 0", [finding],
                     [lambda: rt.ModuleEdit([layer], rt.reinitialise(init), "re-initialised")], [layer],
                     [lambda: edits.snippet(f"# after building the model:\ntorch.nn.init.{text.replace('w', weight, 1)}"
                                            f"\ntorch.nn.init.zeros_({bias})")])


@remedy("LK302")
def bad_initialization(finding: Finding, context: Context) -> list[Candidate]:
    if finding.module is None:
        return []
    return [reinit(finding.module, finding.evidence.get("next_nonlinearity"), finding, context)]


@remedy("LK303")
def unnormalized_input(finding: Finding, context: Context) -> list[Candidate]:
    mean, std = finding.evidence.get("mean"), finding.evidence.get("std")
    if finding.module is None or not mean or not std:
        return []
    layer = finding.module
    return [Candidate(("standardise", layer), "standardise the input (mean and std leaky measured)", [finding],
                      [lambda: rt.ModuleEdit([layer], rt.standardise_input(mean, std), "standardised")], [layer],
                      [lambda: edits.snippet("mean, std = x_train.mean(0), x_train.std(0)   # once, on the "
                                             "training set\nx = (x - mean) / std                           "
                                             f"# every input to {layer}")])]


# -- exploding gradients -----------------------------------------------------------------
def _clip(finding: Finding, context: Context, amplification: float | None) -> list[Candidate]:
    norms = context.grad_norms()
    if not norms:
        return []
    median = statistics.median(norms)
    if amplification and amplification > 1:
        threshold = median / amplification
        note = (f"threshold = median gradient norm {median:.3g} / the amplification leaky measured "
                f"({amplification:.3g}×): the norm the gradient has before it explodes")
    else:
        threshold = median
        note = f"threshold = median gradient norm {median:.3g} over the audited steps: spikes are cut to it"
    params = f"{context.root or 'model'}.parameters()"
    site = context.backward_site
    line = f"torch.nn.utils.clip_grad_norm_({params}, max_norm={threshold:.3g})"
    return [Candidate(("clip",), f"clip the gradient norm at {threshold:.3g}", [finding],
                      [lambda: rt.clip_grad_norm(threshold)], [], [lambda: (
                          edits.insert_line(site[0], site[1], line) if site else None) or edits.snippet(
                          f"# after loss.backward():\n{line}")], note=note)]


@remedy("LK104")
def exploding(finding: Finding, context: Context) -> list[Candidate]:
    return _clip(finding, context, finding.evidence.get("ratio"))


@remedy("LK105")
def recurrent(finding: Finding, context: Context) -> list[Candidate]:
    candidates = []
    growth = finding.evidence.get("growth_first_over_last")
    if (finding.evidence.get("spectral_radius") or 0) > 1:
        candidates.extend(_clip(finding, context, growth))
    module = finding.module
    if module and context.module_types.get(module) in ("RNN", "GRU", "LSTM"):
        weight = _param(module, "weight_hh_l0", context)
        candidates.append(Candidate(
            ("orthogonal", module), "orthogonal recurrent weights (spectral radius 1)", [finding],
            [lambda: rt.ModuleEdit([module], rt.reinitialise(rt.orthogonal(), names=("weight_hh",), zero_bias=False),
                                   "orthogonal")], [module],
            [lambda: edits.snippet(f"# after building the model, for each layer k:\ntorch.nn.init.orthogonal_({weight})")]))
    return candidates


# -- learning rate -----------------------------------------------------------------------
def _lr(factor: float, finding: Finding, context: Context, why: str = "") -> list[Candidate]:
    site = context.backward_site

    def change():
        made = edits.scale_lr(site[0], site[1], factor) if site else None
        return made or edits.snippet(f"lr = lr * {factor:g}   # where the optimizer is built")
    return [Candidate(("lr", factor), f"learning rate × {factor:g}", [finding], [lambda: rt.scaled_lr(factor)],
                      [], [change])]


@remedy("LK202")
def update_ratio(finding: Finding, context: Context) -> list[Candidate]:
    return _lr(0.1 if finding.evidence.get("direction") == "high" else 10.0, finding, context)


@remedy("LK205")
def diverging(finding: Finding, context: Context) -> list[Candidate]:
    # NOTE: a loss that turns NaN because an op produced one (LK107) is told under it, and
    # gets its fixes (`propose`), not a smaller step.
    return _lr(0.1, finding, context)


def lines_of(finding: Finding, site: tuple[str, int] | None) -> list[tuple[str, int]]:
    lines = [(finding.source.file, finding.source.line)] if finding.source is not None else []
    return lines + ([site] if site is not None else [])


@remedy("LK201")
def stale_parameter(finding: Finding, context: Context) -> list[Candidate]:
    if finding.evidence.get("cause") == "gradients cleared before the step" and finding.source is not None:
        return _move_zero_grad(finding, context)
    if finding.evidence.get("cause") != "not in any optimizer":
        return []
    names = list(finding.evidence.get("parameters") or [])
    modules = sorted({name.rpartition(".")[0] for name in names})
    found: list = []

    def collect(module, path):
        wanted = {name.rpartition(".")[2] for name in names if name.rpartition(".")[0] == path}
        found.extend(p for n, p in module.named_parameters(recurse=False) if n in wanted)

    site = context.backward_site
    opt = (edits.optimizer_variable(site[0], site[1]) if site else None) or "optimizer"
    groups = ", ".join(f"{context.root or 'model'}.{m}.parameters()" if m else f"{context.root or 'model'}.parameters()"
                       for m in modules)
    return [Candidate(("add-params",), "add the missing parameters to the optimizer", [finding],
                      [lambda: rt.ModuleEdit(modules, collect, "found"),
                       lambda: rt.add_missing_parameters(lambda: found)], modules,
                      [lambda: edits.snippet(f"{opt}.add_param_group({{'params': [*{groups}]}})"
                                             if len(modules) > 1 else
                                             f"{opt}.add_param_group({{'params': {groups}}})")])]


def _move_zero_grad(finding: Finding, context: Context) -> list[Candidate]:
    """zero_grad() between backward() and step(): skip it there, zero after each step."""
    import torch

    file, line = finding.source.file, finding.source.line
    site = context.backward_site
    what = "zero_grad() before backward(), not between backward() and step()"

    def change():
        made = edits.move_line(file, line, site[1]) if site and site[0] == file else None
        return made or edits.snippet("optimizer.zero_grad()   # before loss.backward(), not after it")
    return [Candidate(("move-zero-grad", file, line), what, [finding],
                      [lambda: rt.SkipCallAtLine((torch.optim.Optimizer, torch.nn.Module), "zero_grad", file, line,
                                                 "misplaced zero_grad() skipped"), rt.zero_grad_after_step],
                      [short_place(finding.source)], [change])]


@remedy("LK203")
def accumulation(finding: Finding, context: Context) -> list[Candidate]:
    site = context.backward_site
    opt = (edits.optimizer_variable(site[0], site[1]) if site else None) or "optimizer"
    return [Candidate(("zero-grad",), "zero the gradients every step", [finding], [rt.zero_grad_after_step], [],
                      [lambda: (edits.insert_line(site[0], site[1], f"{opt}.zero_grad()", after=False) if site
                                else None) or edits.snippet(f"{opt}.zero_grad()   # before loss.backward()")])]
