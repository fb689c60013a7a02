"""`leaky.audit()`: observe whatever training runs inside a `with` block.

    with leaky.audit(steps=None) as audit:
        for x, y in loader:
            loss = loss_fn(model(x), y); opt.zero_grad(); loss.backward(); opt.step()
    print(audit.report)

Observation never changes training: every op returns its own output, hooks return None,
and all instruments are removed on exit, also when the block raises.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

from leaky.checks import run_all
from leaky.config import AuditConfig
from leaky.derive import StatsBuilder, build_stats
from leaky.notes import run_notes
from leaky.record.compiled import NOTE as COMPILED_NOTE
from leaky.record.recorder import Recorder
from leaky.report import Report, build_report
from leaky.stats import AuditStats


def _here_only(fn: Callable | None) -> Callable | None:
    """`fn`, run in this process only. NOTE: a child the script forks while it is observed
    (torch.multiprocessing's Process under the fork start method: Hogwild) inherits leaky's
    hooks, and must train on as it would without leaky: never stopped at this run's step
    limit (a Hogwild child died at its step 20 with StopObserving), nor judged, announced or
    stored as this run (a watch's check passes wrote the children's steps into its store)."""
    if fn is None:
        return None
    pid = os.getpid()

    def call(*args):
        if os.getpid() == pid:
            return fn(*args)
        return None
    return call


class Audit:
    """Context manager around one Recorder. `.report` is ready after the block exits."""

    def __init__(self, steps: int | None = None, config: AuditConfig | None = None,
                 on_limit: Callable[[], None] | None = None,
                 on_step: Callable[[Recorder], None] | None = None, sample_every: int | None = None,
                 on_series: Callable[[list], None] | None = None, schedule=None) -> None:
        base = config or AuditConfig()
        self.config = dataclasses.replace(base, steps=steps) if config is None or steps is not None else base
        self._recorder = Recorder(self.config, StatsBuilder, on_limit=_here_only(on_limit),
                                  on_step=_here_only(on_step),
                                  sample_every=sample_every, on_series=_here_only(on_series), schedule=schedule)
        self.stats: AuditStats | None = None
        self._report: Report | None = None
        self.run_info: dict = {}

    def __enter__(self) -> "Audit":
        self._recorder.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._recorder.__exit__(exc_type, exc, tb)
        try:
            self.stats = build_stats(self._recorder.snapshot(), self._recorder.builder)
        except Exception as exc:   # leaky's own failure: report it, do not mask the user's code
            self._recorder.fail(exc)
            self.stats = AuditStats.empty()
        return False

    @property
    def recorder(self) -> Recorder:
        return self._recorder

    @property
    def report(self) -> Report:
        if self.stats is None:
            raise RuntimeError("the audit is still running: read .report after the `with` block ends")
        if self._report is None:
            run = {"steps": max(self.stats.steps, len(self.stats.series)), "sampled_steps": self.stats.steps,
                   "backward_calls": self.stats.backward_calls,
                   "used_optimizer": self.stats.used_optimizer, "losses": list(self.stats.losses),
                   "internal_error": self._recorder.error, "notes": self._notes(),
                   "unauditable": self._recorder.unauditable, **self.run_info}
            self._report = build_report(self.stats, run_all(self.stats, self.config), run)
        return self._report

    def _notes(self) -> list[str]:
        """One line each: limits of what was observed that the user should know about."""
        names = self._recorder.compiled.names
        compiled = [COMPILED_NOTE.format(name=" and ".join(names))] if names else []
        return compiled + run_notes(self.stats, self.config)

    @property
    def findings(self):
        return self.report.findings


def audit(steps: int | None = None, config: AuditConfig | None = None) -> Audit:
    """Observe the training inside the block; `steps=None` observes all of it."""
    return Audit(steps=steps, config=config)
