"""`leaky explain`: each check's page, kept in the package as Markdown."""
from __future__ import annotations

from importlib import resources

from rich.markdown import Markdown
from rich.table import Table

from leaky.checks import CHECKS, lookup


def page_text(key: str) -> str:
    check = lookup(key)
    return resources.files("leaky").joinpath("pages", f"{check.code}-{check.name}.md").read_text("utf-8")


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
