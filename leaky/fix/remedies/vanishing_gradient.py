"""LK103's fixes: bring each local gain on the gradient's path back near 1, as the finding's
own text says, wherever that can be done at run time.

The gradient entering the first layer is the one entering the last times the local gains
between them (LK103): a sigmoid passes at most 1/4, a linear layer whose weights have std
g / sqrt(fan_in) about g. Two kinds of change act on those factors, three runs in all:

- **re-initialise every layer on the path** with the init its nonlinearity wants
  (`ops.init_for`: Xavier with the sigmoid or tanh gain, Kaiming for ReLU; the last layer,
  which no nonlinearity follows, with the linear gain). It cures weights that are too small
  or too large; it cannot lift a sigmoid's 1/4.
- **an activation of larger local gain** in place of each saturating one between the first
  and the last layer (the module's forward, or the call at its line), with the init it wants
  for the layers: ReLU (derivative 1 wherever it passes, Kaiming init) for a sigmoid or a
  tanh, and tanh (derivative 1 at 0, Xavier at tanh's gain) for a sigmoid. NOTE: the swap
  comes with its init: with PyTorch's default init (std 1 / sqrt(3 fan_in), a gain of ~0.58)
  a ReLU layer still passes ~0.41 of the gradient, and ten of them lose about 4 orders of
  magnitude. Tanh is tried too because its output stays bounded: a learning rate tuned for a
  vanishing sigmoid net can be far too large for a ReLU net whose every layer now learns.

Residual connections and normalisation layers change the architecture: they are not tried.
"""
from __future__ import annotations

import ast
import math
from collections import Counter

import torch

from leaky import ops
from leaky.checks._depth import depth_profile
from leaky.finding import Finding, Source
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.remedies import Candidate, Context, init_for, remedy, short_place
from leaky.stats import AuditStats, OpStats


@remedy("LK103")
def vanishing(finding: Finding, context: Context) -> list[Candidate]:
    profile = depth_profile(context.stats)
    if profile is None:
        return []
    ops_on_path = (profile.earliest, *profile.path)
    layers = path_layers(ops_on_path, context.stats)
    if len(layers) < 2:
        return []
    candidates = [_reinit_path(layers, _family(ops_on_path), finding, context)]
    for target in targets():
        swap = _swap(ops_on_path, layers, finding, context, target)
        if swap is not None:
            candidates.append(swap)
    return candidates


def path_layers(path: tuple[OpStats, ...], stats: AuditStats) -> list[str]:
    """The modules with a weight whose linear or conv op is on the path, in forward order."""
    weighted = {p.module for p in stats.params if p.name.endswith("weight") and p.module is not None}
    layers: list[str] = []
    for op in sorted(path, key=lambda op: op.first_seq):
        if op.module in weighted and ops.layer_kind(op.op) is not None and op.module not in layers:
            layers.append(op.module)
    return layers


def _family(path: tuple[OpStats, ...]) -> str | None:
    """The activation family most of the path's activation sites belong to (None: none)."""
    families = Counter(found.family for op in path if (found := ops.activation(op.op)) is not None)
    return families.most_common(1)[0][0] if families else None


def _expr(path: str, context: Context) -> str:
    """How the user's code reaches the module: `model.fc1`, `model[0]`, `model.layers[3]`."""
    text = context.root or "model"
    for part in path.split(".") if path else []:
        text += f"[{part}]" if part.isdigit() else f".{part}"
    return text


def _reinit_edit(layers: list[str], hidden: str | None):
    """One ModuleEdit's edit: the hidden layers with the init the activation family `hidden`
    wants, the last (no nonlinearity after it) with the linear gain. Each layer draws from
    its own seed (its index), so no two get the same matrix."""
    inits = {path: init_for(hidden if i < len(layers) - 1 else None)[0] for i, path in enumerate(layers)}

    def edit(module, path):
        return rt.reinitialise(inits[path], seed=layers.index(path))(module, path)
    return edit


def _init_snippet(layers: list[str], hidden: str | None, context: Context) -> str:
    _, hidden_text = init_for(hidden)
    _, last_text = init_for(None)
    names = ", ".join(_expr(path, context) for path in layers[:-1])
    last = _expr(layers[-1], context)
    return (f"# after building the model:\nfor layer in ({names}{',' if len(layers) == 2 else ''}):\n"
            f"    torch.nn.init.{hidden_text.replace('(w', '(layer.weight', 1)}\n"
            "    torch.nn.init.zeros_(layer.bias)\n"
            f"torch.nn.init.{last_text.replace('(w', f'({last}.weight', 1)}\n"
            f"torch.nn.init.zeros_({last}.bias)")


def _reinit_path(layers: list[str], family: str | None, finding: Finding, context: Context) -> Candidate:
    _, text = init_for(family)
    what = (f"re-initialise the {len(layers)} layers from {layers[0]} to {layers[-1]} with {text.split('(')[0]} "
            "(the init of their nonlinearity), bias 0")
    return Candidate(("reinit-path",), what, [finding],
                     [lambda: rt.ModuleEdit(layers, _reinit_edit(layers, family), "re-initialised")], [],
                     [lambda: edits.snippet(_init_snippet(layers, family, context))])


# -- an activation of larger local gain in place of a saturating one -------------------------
def _gain(rule: ops.OpRule) -> float:
    """The largest local derivative of an activation (ReLU: 1 wherever it passes, never flat)."""
    bound = rule.activation.max_derivative if rule.activation is not None else None
    return math.inf if bound is None else bound


def targets() -> list[ops.OpRule]:
    """What a saturating activation is swapped for, from the op rules: ReLU (the op LeakyReLU
    replaces), and the saturating activation with the largest derivative (tanh, whose
    bounded output keeps a learning rate tuned for a sigmoid net stable)."""
    (relu,) = ops.with_replacement(ops.LEAKY)
    bounded = [r for r in ops.REGISTRY.rules() if r.activation is not None and r.module is not None
               and r.activation.max_derivative is not None and hasattr(torch, r.name)]
    return [relu] + ([max(bounded, key=_gain)] if bounded else [])


def _saturating(op: OpStats, below: float) -> bool:
    """An activation (not in place) whose derivative never exceeds a bound under `below`."""
    rule = ops.rule(op.op)
    return rule is not None and rule.activation is not None and _gain(rule) < below and not op.op.endswith("_")


def _swap(path: tuple[OpStats, ...], layers: list[str], finding: Finding, context: Context,
          target: ops.OpRule) -> Candidate | None:
    """`target` at every saturating activation of smaller gain between the first and the last
    layer, with the init `target` wants for the layers."""
    modules, lines, swapped, changes, seen = [], [], [], [], []
    for op in sorted((op for op in path if _saturating(op, _gain(target))), key=lambda op: op.first_seq):
        rule = ops.rule(op.op)
        kind = context.module_types.get(op.module or "")
        if op.module and rule.module is not None and kind == rule.module:
            if op.module not in modules:
                modules.append(op.module)
                where = _module_lines(op, context)
                if where[:1] not in seen:      # modules built by one line (in a loop): one change
                    seen.append(where[:1])
                    changes.append(_module_change(op.module, where, kind, target.module))
        elif op.source is not None and (op.source.file, op.source.line, rule.name) not in lines:
            lines.append((op.source.file, op.source.line, rule.name))
            changes.append(_call_change(op.source.file, op.source.line, rule.name, target.name))
        else:
            continue
        swapped.append(rule)
    if not modules and not lines:
        return None
    family, function = target.activation.family, getattr(torch, target.name)
    parts = [lambda: rt.ModuleEdit(layers, _reinit_edit(layers, family), "re-initialised")]
    if modules:
        parts.append(lambda: rt.ModuleEdit(modules, rt.swap_forward(function), f"{target.module} in place"))
    for file, line, name in lines:
        spellings = {s for s in ops.rule(name).spellings if not s.endswith("_")}
        parts.append(lambda file=file, line=line, spellings=spellings: rt.OpAtLine(
            file, line, spellings, lambda f, a, k: function(a[0]), f"{target.module} in place"))
    _, init_text = init_for(family)
    places = modules + [short_place(Source(file, line)) for file, line, _ in lines]
    names = dict.fromkeys(rule.module or rule.name for rule in swapped)
    what = (f"{target.module} in place of {'/'.join(names)}, the layers re-initialised with "
            f"{init_text.split('(')[0]}")
    changes.append(lambda: edits.snippet(_init_snippet(layers, family, context)))
    replaced = "; ".join(dict.fromkeys(rule.activation.formula for rule in swapped if rule.activation.formula))
    said = target.activation.formula or f"the {target.module} derivative is 1 wherever it passes, never flat"
    return Candidate(("swap", target.name), what, [finding], parts, places, changes,
                     note=f"{said}, against: {replaced}; the layers get the init {target.module} wants")


def _module_lines(op: OpStats, context: Context) -> list[tuple[str, int]]:
    """Where a module activation may be built: its op's line, then where it was assigned."""
    site = context.construction.get(op.module)
    lines = [(op.source.file, op.source.line)] if op.source is not None else []
    return lines + ([site] if site is not None and site not in lines else [])


def _module_change(path: str, lines: list[tuple[str, int]], kind: str, new: str):
    """nn.Sigmoid() -> nn.ReLU() at the line that built the module, else a snippet."""
    def change():
        for file, line in lines:
            made = edits.rewrite_call(file, line, {kind}, lambda source, node: None if node.args or node.keywords
                                      else ast.get_source_segment(source, node).replace(kind, new, 1))
            if made is not None:
                return made
        return edits.snippet(f"# {path}: nn.{new}() in place of nn.{kind}()")
    return change


def _call_change(file: str, line: int, name: str, new: str):
    """torch.sigmoid(x) -> torch.relu(x) (or x.sigmoid() -> x.relu()) at that line."""
    def rewrite(source, node):
        func = ast.get_source_segment(source, node.func)
        call = ast.get_source_segment(source, node)
        if not func or not call or not func.endswith(name):
            return None
        return func[:-len(name)] + new + call[len(func):]

    def change():
        return edits.rewrite_call(file, line, {name}, rewrite) or edits.snippet(
            f"# {short_place(Source(file, line))}: {new} in place of {name}")
    return change
