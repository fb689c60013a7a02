"""Hugging Face `transformers.Trainer`: audit the first steps, watch the rest.

    from leaky.integrations.transformers import LeakyCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[LeakyCallback()])

Findings are announced once (main process), added to the Trainer's logs as
`leaky/findings` and `leaky/errors`, and kept in `store` if given.
"""
from __future__ import annotations

from leaky.integrations import require
from leaky.watch import DEFAULT_EVERY, Watch

_tf = require("transformers", "transformers")


class LeakyCallback(_tf.TrainerCallback):
    def __init__(self, audit_steps: int = 20, every: int = DEFAULT_EVERY, store=None, fail_fast: bool = False,
                 tensorboard=None) -> None:
        self.audit_steps, self.every, self.store = audit_steps, every, store
        self.fail_fast, self.tensorboard = fail_fast, tensorboard
        self.watch: Watch | None = None
        self.report = None

    @property
    def findings(self):
        return [] if self.report is None else list(self.report.findings)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        sinks = []
        if self.tensorboard is not None:
            from leaky.integrations.tensorboard import TensorBoardSink

            sinks.append(TensorBoardSink(self.tensorboard))
        self.watch = Watch(every=self.every, store=self.store, fail_fast=self.fail_fast, audit_steps=self.audit_steps,
                           on_finding=lambda f, step: self._announce(state, f, step), sinks=sinks,
                           script="transformers.Trainer", argv=[type(model).__name__ if model is not None else ""])
        self.watch.__enter__()

    def _announce(self, state, finding, step) -> None:
        if state.is_world_process_zero:
            print(f"leaky: step {step}: {finding.severity.value} {finding.code} {finding.name} at "
                  f"{finding.where}: {finding.message}")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.watch is None or logs is None:
            return
        counts = {"leaky/findings": len(self.watch.seen),
                  "leaky/errors": sum(1 for f in self.watch.seen.values() if f.severity.value == "error")}
        logs.update(counts)   # the loggers that run after this callback see them
        if state.log_history:
            state.log_history[-1].update(counts)

    def on_train_end(self, args, state, control, **kwargs):
        if self.watch is not None:
            watch, self.watch = self.watch, None
            watch.__exit__(None, None, None)
            self.report = watch.report
