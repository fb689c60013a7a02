"""From findings to candidate fixes: one file per check that has a remedy, named like the
check (leaky/checks/dead_zone.py's remedy is leaky/fix/remedies/dead_zone.py), registered
by check code with `@remedy("LK106")`.

A remedy reads a finding (and the audit's statistics) and proposes zero or more
`Candidate`s. Candidates with the same key are one experiment: the three dead ReLU layers
of one network become one "LeakyReLU at act1, act2, act3" run, and a re-initialisation
proposed by both saturated-activation and bad-initialization is run once.
Only mechanical remedies are here; a finding without one is listed, not guessed at.

This module holds what remedies share: `Context`, `Candidate`, the registry, `propose`,
and the candidates more than one check proposes (`reinit`, `scaled_learning_rate`,
`clipped_gradient`). Every other module of the package (but a leading underscore) is one
check's remedy, imported at the end (`registry.discover`): no hand-written list.
"""
from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Callable

from leaky import ops
from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.change import Change
from leaky.registry import Registry, discover
from leaky.rerun.trial import Changes
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

    def build(self) -> Changes:
        return Changes(*(make() for make in self.parts))

    def change(self) -> Change | None:
        """One diff when every part has one at a known line, else snippets."""
        made = [make() for make in self.changes]
        if not made or any(c is None for c in made):
            return None
        if all(c.kind == "diff" for c in made) and len(made) == 1:
            return made[0]
        return Change("snippet" if any(c.kind == "snippet" for c in made) else "diff",
                      "\n".join(c.text for c in made))


Remedy = Callable[[Finding, Context], list[Candidate]]
REMEDIES: Registry = Registry("a remedy")   # check code -> its remedy (one per check, in the check's file)


def remedy(code: str) -> Callable[[Remedy], Remedy]:
    """Register the remedy of check `code`: (finding, context) -> its candidate fixes."""
    return lambda function: REMEDIES.add(code, function)


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
            if why is not None and id(root) in parent:   # its root follows from another: name the first one once
                context.why_not[id(finding)] = why
            else:
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


def parameter_name(path: str, name: str, context: Context) -> str:
    """How the user's code names the parameter `name` of the module at `path`."""
    prefix = f"{context.root}." if context.root else "model."
    return f"{prefix}{path}.{name}" if path else f"{prefix}{name}"


def lines_of(finding: Finding, site: tuple[str, int] | None) -> list[tuple[str, int]]:
    """Where a module may be built: the finding's line, then `site` (where it was assigned)."""
    lines = [(finding.source.file, finding.source.line)] if finding.source is not None else []
    return lines + ([site] if site is not None else [])


def feeding_layer(stats: AuditStats, finding: Finding) -> str | None:
    """The module with weights whose output the activation of `finding` reads: the last
    weighted op before it in forward order."""
    weighted = {p.module for p in stats.params if p.name.endswith("weight") and p.module is not None}
    ordered = sorted(stats.ops, key=lambda op: op.first_seq)
    alike = [i for i, op in enumerate(ordered) if op.module == finding.module and op.op == finding.op]
    # NOTE: a module may call the op on several lines (a forward's three F.relu): the one at
    # the finding's line, else the first
    at = next((i for i in alike if finding.source is not None and ordered[i].source is not None
               and (ordered[i].source.file, ordered[i].source.line) == (finding.source.file, finding.source.line)),
              alike[0] if alike else None)
    if at is None:
        return None
    return next((op.module for op in reversed(ordered[:at]) if op.module in weighted), None)


# -- candidates more than one check proposes -------------------------------------------
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
    weight, bias = parameter_name(layer, "weight", context), parameter_name(layer, "bias", context)
    return Candidate(("reinit", layer), f"re-initialise with {text.split('(')[0]}, bias 0", [finding],
                     [lambda: rt.ModuleEdit([layer], rt.reinitialise(init), "re-initialised")], [layer],
                     [lambda: edits.snippet(f"# after building the model:\ntorch.nn.init.{text.replace('w', weight, 1)}"
                                            f"\ntorch.nn.init.zeros_({bias})")])


def clipped_gradient(finding: Finding, context: Context, amplification: float | None) -> list[Candidate]:
    """Clip the gradient norm at the median norm over the amplification leaky measured (LK104, LK105)."""
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


def scaled_learning_rate(factor: float, finding: Finding, context: Context, why: str = "") -> list[Candidate]:
    """The learning rate × `factor` (LK102, LK202, LK205)."""
    site = context.backward_site

    def change():
        made = edits.scale_lr(site[0], site[1], factor) if site else None
        return made or edits.snippet(f"lr = lr * {factor:g}   # where the optimizer is built")
    return [Candidate(("lr", factor), f"learning rate × {factor:g}", [finding], [lambda: rt.scaled_lr(factor)],
                      [], [change])]


discover(__name__, __path__)
