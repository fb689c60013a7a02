"""leaky: find where backprop leaks in a PyTorch training run.

    leaky audit train.py --epochs 3       # the user's unmodified script
    leaky explain dead-zone               # what a check means and how to fix it
    leaky demo                            # the built-in broken models, and their fixes

In Python, `with leaky.audit() as audit: ...train...` then `audit.report`, or
`with leaky.watch(every=50, store="runs.db") as run: ...` for a whole run.
"""
from leaky.audit import Audit, audit
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity, Source
from leaky.report import SCHEMA, Report
from leaky.version import __version__
from leaky.watch import Watch, watch

__all__ = ["Audit", "AuditConfig", "Finding", "Report", "SCHEMA", "Severity", "Source", "Watch", "audit", "watch",
           "__version__"]
