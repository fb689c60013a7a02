"""Replace an attribute and put it back: the one way leaky patches torch and Python globals.

`Patch(owner, name, make)` is a context manager. On enter, `owner.name` becomes
`make(original)`, the original read from the owner's own namespace (a classmethod put back
stays a classmethod); on exit, also after an error, the original is back. A Patch that was
never entered, or has been left already, does nothing on exit. `Patches` enters several
and leaves them in reverse.
"""
from __future__ import annotations

from typing import Any, Callable


class Patch:
    """Context manager: `owner.name` is `make(original)` inside, the original again after."""

    def __init__(self, owner: Any, name: str, make: Callable[[Any], Any], unless_replaced: bool = False) -> None:
        """`unless_replaced`: on exit, leave the attribute as it is when something replaced
        ours meanwhile (a library imported during the run that wrapped ours keeps it beneath
        its own wrapper, calling through)."""
        self.owner, self.name, self.make, self.unless_replaced = owner, name, make, unless_replaced
        self.original: Any = None
        self.replacement: Any = None
        self.active = False

    def __enter__(self) -> "Patch":
        self.original = vars(self.owner)[self.name]
        self.replacement = self.make(self.original)
        setattr(self.owner, self.name, self.replacement)
        self.active = True
        return self

    def __exit__(self, *exc) -> None:
        if not self.active:
            return
        self.active = False
        if not self.unless_replaced or getattr(self.owner, self.name) is self.replacement:
            setattr(self.owner, self.name, self.original)


class Patches:
    """Several Patch, entered in order and left in reverse; when one fails to enter, those
    already entered are left before the error goes on (a Patch not entered does nothing on
    exit)."""

    def __init__(self, patches) -> None:
        self.patches = list(patches)

    def __enter__(self) -> "Patches":
        try:
            for patch in self.patches:
                patch.__enter__()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for patch in reversed(self.patches):
            patch.__exit__(*exc)


__all__ = ["Patch", "Patches"]
