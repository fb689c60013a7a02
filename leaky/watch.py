"""`leaky.watch()`: follow a whole training run cheaply, remember it, and announce each
problem at the step it first appears.

    with leaky.watch(store="runs.db") as run:       # within 2% of the training time
        ...training loop...
    run.findings

Every step costs a loss, a total gradient norm and a learning rate, kept on the device and
copied to the host in batches. Some steps are observed in detail: the full audit
instruments run for one step, the audit's one-time probes included (LK306's batch probe, the
re-check of custom autograd Functions, the first loss, the raw inputs), each on the first
sampled step where it applies. Which steps: as many as the overhead budget pays for
(`overhead`, 2% of the training time by default, measured in the run: record/budget.py),
or every `every`-th step when that is given. After a sampled step the checks run on
everything seen so far (at most once every CHECK_GAP steps), and new findings are announced
once (`on_finding`; again if one rises in severity) and stored. `leaky watch` announces each
warning and error in one line as it appears (leaky/report/announce.py) and tells it in full
in the final report, with one line for the announced findings that the end no longer reports
(`unconfirmed`), and one for what the watch cost (`run.overhead` in the report). At
`every=1` a watch reaches the verdict of an audit over the same steps
(tests/e2e/test_commands_agree.py). The store is optional in Python and the default on the
command line.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import Callable

import torch

from leaky.audit import Audit
from leaky.checks import run_all
from leaky.config import AuditConfig
from leaky.derive import build_stats
from leaky.finding import Finding, Severity
from leaky.process import distributed
from leaky.record.budget import DEFAULT_EVERY, DEFAULT_SHARE, Budget, Schedule
from leaky.record.recorder import Recorder, StopObserving
from leaky.report.tables import module_rows
from leaky.store import Store, git_commit
from leaky.story import told_under

# NOTE: the check pass (folding everything seen so far, every check, the store's module rows)
# costs milliseconds (docs/performance.md), more when a spectral radius is recomputed: after a
# sampled step it runs only if the last pass was at least this many steps before, so at
# `every` < 10 its cost is spread over 10 steps. Statistics are still taken at every sampled
# step; a finding is announced at the first pass after it appears (the last pass, at the end,
# misses nothing).
CHECK_GAP = 10
# NOTE: a pass reads the whole every-step series (the loss and norm checks walk it), so its
# cost grows with the run. Passes are also spaced by at least 1/CHECK_SPREAD of the steps so
# far, so that their cost per step stays flat over a long run (at step 50,000 a pass every
# 5,000 steps), and a finding is announced at most that many steps after it appears.
CHECK_SPREAD = 10


class FailFast(StopObserving):
    """Raised out of the training loop at the first error-severity finding (--fail-fast)."""


def _key(finding: Finding) -> tuple:
    source = (finding.source.file, finding.source.line) if finding.source else None
    return finding.code, finding.module, finding.op, source


class Watch(Audit):
    """An Audit that samples every `every`-th step in detail and keeps a run in a store."""

    def __init__(self, every: int | None = None, store: str | os.PathLike | None = None,
                 config: AuditConfig | None = None, fail_fast: bool = False,
                 on_finding: Callable[[Finding, int], None] | None = None,
                 script: str | None = None, argv: list[str] | None = None,
                 on_step: Callable[[Recorder], None] | None = None, audit_steps: int = 0,
                 sinks: list | None = None, overhead: float = DEFAULT_SHARE,
                 clock: Callable[[], float] | None = None) -> None:
        """`every`: observe every N-th step in detail; None (the default): as many steps as
        the overhead budget pays for, `overhead` (0.02: 2% of the training time) measured in
        this run (record/budget.py). `clock`: the budget's clock (tests pass a fake one)."""
        if every is not None and every < 1:
            raise ValueError(f"every must be a positive number of steps, not {every}")
        config = config or AuditConfig(steps=None)
        timing = {} if clock is None else {"clock": clock}
        schedule = Schedule(every, **timing) if every is not None else \
            Budget(overhead, several_ranks=distributed.running, **timing)
        super().__init__(steps=None, config=config, on_step=self._after_step, sample_every=every or 0,
                         on_series=self._store_series, schedule=schedule)
        self.every = every
        self.recorder.dense_steps = audit_steps   # audit the first steps, then sample
        self.sinks = list(sinks or [])            # e.g. a TensorBoard writer: .write(step, stats, new)
        self.store_path = store
        self.fail_fast = fail_fast
        self.on_finding = on_finding
        self.user_on_step = on_step
        self.script = script if script is not None else (sys.argv[0] if sys.argv else "")
        self.argv = list(argv if argv is not None else sys.argv[1:])
        self.store: Store | None = None
        self.run_id: int | None = None
        self.seen: dict[tuple, Finding] = {}        # each finding as the last pass saw it
        self.announced: dict[tuple, Finding] = {}   # each as announced, at its most severe
        self.told: set[tuple] = set()   # those handed to on_finding (the others were told under their root's line)
        self.announced_at: dict[tuple, int] = {}    # the step of the pass that announced it so
        self._folded = 0
        self._checked_at: int | None = None    # step of the last check pass

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "Watch":
        if not distributed.is_main():
            self.store_path, self.on_finding, self.sinks = None, None, []   # only rank 0 writes
        if self.store_path is not None:
            self.store = Store(self.store_path)
            self.run_id = self.store.start_run(
                self.script, self.argv, torch_version=torch.__version__, leaky_version=_version(),
                device=_device(), git_commit=git_commit(os.path.dirname(os.path.abspath(self.script or "."))))
        super().__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        overhead = self.recorder.schedule.summary()   # before the report is built
        overhead["norms_from_clip"] = self.recorder.monitor.offered_used
        overhead["optimizer_steps"] = self.recorder.monitor.optimizer_steps
        self.run_info["overhead"] = overhead
        super().__exit__(exc_type, exc, tb)
        self._announce(self.report.findings, self._last_step())
        self._report = dataclasses.replace(self.report, unconfirmed=tuple(self._unconfirmed_rows()))
        for sink in self.sinks:
            sink.close()
        if self.store is not None:
            status = self.run_info.get("status") or _status(exc_type)
            error = self.run_info.get("error")   # the script's failure in one line (a nonzero sys.exit too)
            status = {"exited": "failed" if error else "finished", "interrupted": "stopped"}.get(status, status)
            if error is None and exc is not None and not isinstance(exc, StopObserving):
                error = f"{type(exc).__name__}: {exc}"
            self.store.save_report(self.run_id, self.report.to_dict())
            self.store.end_run(self.run_id, status, error or self.recorder.error)
            self.store.close()
        return False

    def _last_step(self) -> int:
        """The last optimizer step the run reached (the recorder's counter is one past it,
        unless a step was left unfinished)."""
        if self.stats.series:
            return self.stats.series[-1].step
        return max(self.recorder.step - 1, 0)

    # -- per step ----------------------------------------------------------------------
    def _store_series(self, rows) -> None:
        if self.store is not None:
            self.store.add_steps(self.run_id, [(row.step, _finite(row.loss), _finite(row.grad_norm),
                                                _bad(row.loss, row.grad_norm)) for row in rows])

    def _after_step(self, recorder: Recorder) -> None:
        if self.user_on_step is not None:
            self.user_on_step(recorder)
        if recorder.builder.steps == self._folded:
            return   # not a sampled step
        self._folded = recorder.builder.steps
        step = recorder.step - 1
        if self._checked_at is not None and step - self._checked_at < max(CHECK_GAP, step // CHECK_SPREAD):
            return   # the last check pass was less than CHECK_GAP steps ago, or a tenth of the run
        self._checked_at = step
        recorder.flush_series()   # the checks read the loss series up to this step
        stats = build_stats(recorder.snapshot(), recorder.builder)
        findings = run_all(stats, self.config)
        if self.store is not None:
            self.store.add_module_stats(self.run_id, step, [
                {"module": row["module"], "grad_norm": row["grad_norm"], "gain": row["gain"],
                 "dead_share": row["dead_share"], "saturated_share": row["saturated_share"],
                 "update_ratio": row["update_ratio"]} for row in module_rows(stats)])
        # NOTE: a provisional finding (its verdict waits on steps still to come: whether the
        # loss falls, judged on loss_min_steps losses) is neither announced nor stored by a pass
        # in the middle of the run; the last pass, the report's, judges it on the whole run.
        new = self._announce([f for f in findings if not f.evidence.get("provisional")], step)
        for sink in self.sinks:
            sink.write(step, stats, findings, new)
        if self.fail_fast and any(f.severity is Severity.ERROR for f in new):
            raise FailFast()

    def _announce(self, findings, step) -> list[Finding]:
        """Store every finding (updating its last step); return and announce the new ones:
        those first seen, and those seen before at a lower severity (an info that the run's
        evidence has since made a warning is announced again, as the warning)."""
        new = []
        under = told_under(findings)
        for finding in findings:
            key = _key(finding)
            self.seen[key] = finding
            if self.store is not None:
                self.store.record_finding(self.run_id, finding.to_dict(), step)
            before = self.announced.get(key)
            if before is None or finding.severity.rank > before.severity.rank:
                self.announced[key] = finding
                self.announced_at[key] = step
                new.append(finding)
                root = under.get(id(finding))
                if root is not None and root.severity.rank >= finding.severity.rank:
                    continue   # one story, one line: its root's (a cut's line, not each module it starves)
                self.told.add(key)
                if self.on_finding is not None:
                    self.on_finding(finding, step)
        return new

    @property
    def unconfirmed(self) -> list[tuple[Finding, Finding | None]]:
        """The findings announced during the run that the final pass no longer reports, or
        reports as less severe: each as announced, and as the end reports it (None when not
        at all). Their evidence changed as the run went on (units that fired again, a high
        update ratio while the loss kept falling). Read after the run, as `.report`."""
        final = {_key(f): f for f in self.report.findings}
        return [(f, final.get(key)) for key, f in self.announced.items() if key in self.told
                if key not in final or final[key].severity.rank < f.severity.rank]

    def _unconfirmed_rows(self) -> list[dict]:
        """The JSON report's `unconfirmed`: what `leaky watch` announced live (warnings and
        errors, report/announce.py) that the end no longer reports, or reports as less severe."""
        from leaky.report.announce import announced

        rows = []
        for said, now in self.unconfirmed:
            if announced(said):
                rows.append({"code": said.code, "name": said.name, "module": said.module, "op": said.op,
                             "source": None if said.source is None else {"file": said.source.file,
                                                                          "line": said.source.line},
                             "announced_as": said.severity.value, "announced_at_step": self.announced_at.get(_key(said)),
                             "reported_as": None if now is None else now.severity.value, "message": said.message})
        return rows


def _finite(value):
    return value if value is not None and math.isfinite(value) else None


def _bad(loss, norm) -> bool:
    return any(v is not None and not math.isfinite(v) for v in (loss, norm))


def _status(exc_type) -> str:
    if exc_type is None:
        return "finished"
    if issubclass(exc_type, (StopObserving, KeyboardInterrupt)):
        return "stopped"
    return "failed"


def _version() -> str:
    from leaky.version import __version__

    return __version__


def _device() -> str:
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)}"
    return "cpu"


def watch(every: int | None = None, store: str | os.PathLike | None = None, fail_fast: bool = False,
          config: AuditConfig | None = None, tensorboard: str | os.PathLike | None = None,
          overhead: float = DEFAULT_SHARE) -> Watch:
    """Follow the training inside the block, observing in detail as many steps as `overhead`
    (a share of the training time, measured in the run) pays for, or every `every`-th step;
    keep it in `store` (a SQLite file) if given, and write TensorBoard events to
    `tensorboard` (a log dir) if given."""
    return Watch(every=every, store=store, fail_fast=fail_fast, config=config, sinks=watch_sinks(tensorboard),
                 overhead=overhead)


def watch_sinks(tensorboard: str | os.PathLike | None) -> list:
    """What a watch writes to besides its store: TensorBoard events in `tensorboard` (a log
    dir), if given."""
    if tensorboard is None:
        return []
    from leaky.integrations.tensorboard import TensorBoardSink

    return [TensorBoardSink(tensorboard)]
