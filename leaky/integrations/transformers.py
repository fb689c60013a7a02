"""Hugging Face `transformers.Trainer`: audit the first steps, watch the rest.

    from leaky.integrations.transformers import LeakyCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[LeakyCallback()])

Findings are announced once (main process), added to the Trainer's logs as
`leaky/findings` and `leaky/errors`, and kept in `store` if given.
"""
from __future__ import annotations

from leaky.integrations import require
from leaky.integrations._callback import WatchSettings

_tf = require("transformers", "transformers")


class LeakyCallback(_tf.TrainerCallback, WatchSettings):
    def __init__(self, *args, **kwargs) -> None:
        WatchSettings.__init__(self, *args, **kwargs)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        name = type(model).__name__ if model is not None else ""
        self.start_watch(lambda f, step: self._announce(state, f, step), "transformers.Trainer", [name])

    def _announce(self, state, finding, step) -> None:
        if state.is_world_process_zero:
            print(f"leaky: step {step}: {finding.severity.value} {finding.code} {finding.name} at "
                  f"{finding.where}: {finding.message}")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.watch is None or logs is None:
            return
        counts = {key: int(value) for key, value in self.counts().items()}
        logs.update(counts)   # the loggers that run after this callback see them
        if state.log_history:
            state.log_history[-1].update(counts)

    def on_train_end(self, args, state, control, **kwargs):
        self.stop_watch()
