"""PyTorch Lightning: audit the first steps of `trainer.fit`, watch the rest.

    from leaky.integrations.lightning import LeakyCallback
    trainer = lightning.Trainer(callbacks=[LeakyCallback(audit_steps=20, every=100)])

Findings are announced once (rank zero), logged through the trainer's loggers as
`leaky/findings` and `leaky/errors`, and kept in `store` if given. `callback.report` and
`callback.findings` hold the result after fit.
"""
from __future__ import annotations

from leaky.integrations import require
from leaky.watch import DEFAULT_EVERY, Watch

_pl = require("lightning", "lightning").pytorch


class LeakyCallback(_pl.Callback):
    def __init__(self, audit_steps: int = 20, every: int = DEFAULT_EVERY, store=None, fail_fast: bool = False,
                 tensorboard=None) -> None:
        super().__init__()
        self.audit_steps, self.every, self.store = audit_steps, every, store
        self.fail_fast, self.tensorboard = fail_fast, tensorboard
        self.watch: Watch | None = None
        self.report = None

    @property
    def findings(self):
        return [] if self.report is None else list(self.report.findings)

    def on_fit_start(self, trainer, pl_module) -> None:
        sinks = []
        if self.tensorboard is not None:
            from leaky.integrations.tensorboard import TensorBoardSink

            sinks.append(TensorBoardSink(self.tensorboard))
        self.watch = Watch(every=self.every, store=self.store, fail_fast=self.fail_fast, audit_steps=self.audit_steps,
                           on_finding=lambda f, step: self._announce(trainer, f, step), sinks=sinks,
                           script="lightning", argv=[type(pl_module).__name__])
        self.watch.__enter__()

    def _announce(self, trainer, finding, step) -> None:
        if trainer.is_global_zero:
            _pl.utilities.rank_zero_info(f"leaky: step {step}: {finding.severity.value} {finding.code} "
                                         f"{finding.name} at {finding.where}: {finding.message}")
        errors = sum(1 for f in self.watch.seen.values() if f.severity.value == "error")
        for logger in trainer.loggers:
            logger.log_metrics({"leaky/findings": float(len(self.watch.seen)), "leaky/errors": float(errors)},
                               step=step)

    def _close(self, error: BaseException | None = None) -> None:
        if self.watch is not None:
            watch, self.watch = self.watch, None
            watch.__exit__(type(error) if error else None, error, None)
            self.report = watch.report

    def on_fit_end(self, trainer, pl_module) -> None:
        self._close()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._close(exception)
