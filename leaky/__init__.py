"""leaky: find where backprop leaks in a PyTorch training run.

    leaky audit train.py --epochs 3       # the user's unmodified script
    leaky explain dead-zone               # what a check means and how to fix it
    leaky demo                            # the built-in broken models, and their fixes

In Python, `with leaky.audit() as audit: ...train...` then `audit.report`, or
`with leaky.watch(every=50, store="runs.db") as run: ...` for a whole run.
"""
from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING

from leaky.version import __version__

# NOTE: the names that import torch are loaded on first use (PEP 562), so that `import leaky`
# and the commands that never touch torch (`leaky --help`, `explain`, `runs`) answer at once.
_LAZY = {"Audit": "leaky.audit", "audit": "leaky.audit", "Watch": "leaky.watch", "watch": "leaky.watch",
         "AuditConfig": "leaky.config", "Finding": "leaky.finding", "Severity": "leaky.finding",
         "Source": "leaky.finding", "Report": "leaky.report", "SCHEMA": "leaky.report"}

if TYPE_CHECKING:
    from leaky.audit import Audit, audit
    from leaky.config import AuditConfig
    from leaky.finding import Finding, Severity, Source
    from leaky.report import SCHEMA, Report
    from leaky.watch import Watch, watch


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'leaky' has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value        # the next look-up is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package object. NOTE: importing the submodule `leaky.audit` (or `leaky.watch`) binds
    it as the package's attribute; here it binds the function of the same name instead, so that
    `leaky.audit` is the function whatever was imported first, as when this file imported it."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.{name}" and hasattr(value, name) \
                and _LAZY.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = ["Audit", "AuditConfig", "Finding", "Report", "SCHEMA", "Severity", "Source", "Watch", "audit", "watch",
           "__version__"]
