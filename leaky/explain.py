"""`leaky explain`: each check's page, kept in the package as Markdown.

A check that judges ops by their rules (leaky/ops) ends its page with the ops it knows
today, written from those rules: the page and the check's messages draw on one text, and
an op rule registered later appears on the page with no page edited.

A page writes a threshold as `{{config.FIELD:FORMAT}}` and an op's local derivative as
`{{op.NAME}}`; both are filled in when the page is rendered, from the config in force and
the op's rule, so a number or a derivative is written once:

    **warning** when the share is ≥ {{config.dead_zone_warning:.0%}}   ->  ≥ 25%
    below {{config.vanishing_warning:.0e}}                            ->  below 1e-3 (not Python's 1e-03)
    # {{op.clamp}}                                                    ->  # d/dx clamp(x, lo, hi) = 1 inside [lo, hi] ...
"""
from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Callable

from rich.markdown import Markdown
from rich.table import Table

from leaky import ops
from leaky.checks import CHECKS, lookup
from leaky.config import AuditConfig

_FIELD = re.compile(r"\{\{(config|op)\.(\w+)(?::([^}]*))?\}\}")
_EXPONENT = re.compile(r"e\+?(-?)0*(\d)")   # Python's e+03, e-03 as the pages write them: e3, e-3


def _grouped(pairs) -> list[str]:
    """One line per text, naming every op that shares it."""
    by_text: dict[str, list[str]] = {}
    for name, text in pairs:
        by_text.setdefault(text, []).append(f"`{name}`")
    return [f"- {', '.join(names)}: {text}" for text, names in by_text.items()]


def _dead_zones() -> list[str]:
    return _grouped((r.name, r.zero.derivative) for r in ops.REGISTRY.rules() if r.zero is not None)


def _flat_activations() -> list[str]:
    families = {r.activation.family: r.activation for r in ops.REGISTRY.rules()
                if r.activation is not None and r.activation.formula}
    rows = _grouped((r.name, f"judged per row: {r.derivative}") for r in ops.REGISTRY.rules()
                    if r.activation is not None and r.activation.rows)
    return [f"- `{name}`: {family.formula}" for name, family in families.items()] + rows


def _traps() -> list[str]:
    return _grouped((r.name, r.trap[0]) for r in ops.REGISTRY.rules() if r.trap is not None)


def _losses() -> list[str]:
    return _grouped((r.name, f"expects {r.loss}") for r in ops.REGISTRY.rules() if r.loss is not None)


def _scales() -> list[str]:
    return _grouped((r.name, (r.scales.__doc__ or "").split("\n\n")[0].rstrip(".")) for r in ops.REGISTRY.rules()
                    if r.scales is not None)


def _cuts() -> list[str]:
    return [f"- {kind.what}: {kind.fix}" for kind in ops.calls.CUT_KINDS.values()]


# check code -> (heading, the lines it lists from the op registry)
OPS_SECTIONS: dict[str, tuple[str, Callable[[], list[str]]]] = {
    "LK101": ("Activations it judges (from leaky's op rules)", _flat_activations),
    "LK106": ("Ops it judges (from leaky's op rules)", _dead_zones),
    "LK107": ("Backward traps it names (from leaky's op rules)", _traps),
    "LK108": ("Cuts it names (from leaky's op rules)", _cuts),
    "LK301": ("Losses it knows (from leaky's op rules)", _losses),
    "LK307": ("Scales it follows back to the layer, by a single number (from leaky's op rules)", _scales),
}


def _filled(text: str, config: AuditConfig) -> str:
    """The page with each `{{config.FIELD:FORMAT}}` and `{{op.NAME}}` replaced (an unknown name raises)."""
    def value(match: re.Match) -> str:
        kind, name, spec = match.groups()
        if kind == "config":
            written = format(getattr(config, name), spec or "")
            return _EXPONENT.sub(r"e\1\2", written) if (spec or "").endswith("e") else written
        rule = ops.rule(name)
        if rule is None:
            raise KeyError(f"no op rule named {name!r}")
        return rule.zero.derivative if rule.zero is not None else rule.derivative
    return _FIELD.sub(value, text)


def page_text(key: str, config: AuditConfig | None = None) -> str:
    """A check's page, its thresholds read from `config` (the defaults when None)."""
    check = lookup(key)
    page = resources.files("leaky").joinpath("pages", f"{check.code}-{check.name}.md") if check.page is None \
        else Path(check.page)
    text = page.read_text("utf-8")
    text = _filled(text, config or AuditConfig())
    section = OPS_SECTIONS.get(check.code)
    if section is not None:
        heading, lines = section
        text = text.rstrip() + f"\n\n## {heading}\n\n" + "\n".join(lines()) + "\n"
    if check.explained_by:
        causes = [f"- {code} {CHECKS[code].name}: {CHECKS[code].summary}" for code in check.explained_by]
        text = text.rstrip() + "\n\n## The findings that can explain it, in the order it names them\n\n" + \
            "\n".join(causes) + "\n"
    return text


def page(key: str) -> Markdown:
    return Markdown(page_text(key))


def list_checks() -> Table:
    table = Table(title="leaky checks (leaky explain NAME|CODE)", title_justify="left", show_edge=False)
    table.add_column("code")
    table.add_column("name")
    table.add_column("what it finds")
    for check in CHECKS.values():
        table.add_row(check.code, check.name, check.summary)
    return table
