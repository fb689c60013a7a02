"""The registries of things found on import: checks, remedies, instruments, statistics.

A package that holds one file per thing ends its `__init__` with `discover(__name__,
__path__)`: each module (its helpers, with a leading underscore, aside) is imported and
registers itself with a decorator. `Registry` is a dict that refuses a name twice and, for
tests that register at test time, can be put back as it was (`restored`). A leaf.
"""
from __future__ import annotations

import pkgutil
from contextlib import contextmanager
from importlib import import_module
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def discover(package: str, path: Iterable[str]) -> None:
    """Import every module of `package` but its helpers, in the order of their names."""
    for module in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if not module.name.startswith("_"):
            import_module(f"{package}.{module.name}")


class Registry(dict):
    """name -> the thing registered under it, once."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind   # what a message calls one: "an instrument", "a remedy"

    def add(self, name: str, thing: T) -> T:
        if name in self:
            raise ValueError(f"{self.kind} named {name!r} is already registered")
        self[name] = thing
        return thing

    @contextmanager
    def restored(self) -> Iterator[None]:
        """The registry as it was, after the block."""
        before = dict(self)
        try:
            yield
        finally:
            self.clear()
            self.update(before)
