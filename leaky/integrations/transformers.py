"""Hugging Face `transformers.Trainer`: audit the first steps, watch the rest.

    from leaky.integrations.transformers import LeakyCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[LeakyCallback()])

As `leaky watch` does, each warning and error is announced once (main process) in one line
(step, code, name, place, headline), and every finding is told in full once, at the end of
training. The counts are added to the Trainer's logs as `leaky/findings` and `leaky/errors`,
the findings kept in `store` if given; `callback.report` and `callback.findings` after.
"""
from __future__ import annotations

from leaky.integrations import require
from leaky.integrations._callback import WatchSettings, live_line

_tf = require("transformers", "transformers")


class LeakyCallback(_tf.TrainerCallback, WatchSettings):
    def __init__(self, *args, **kwargs) -> None:
        WatchSettings.__init__(self, *args, **kwargs)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        name = type(model).__name__ if model is not None else ""
        self.start_watch(lambda f, step: self._announce(state, f, step), "transformers.Trainer", [name])

    def _announce(self, state, finding, step) -> None:
        line = live_line(finding, step)
        if line is not None and state.is_world_process_zero:
            print(line)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.watch is None or logs is None:
            return
        counts = {key: int(value) for key, value in self.counts().items()}
        logs.update(counts)   # the loggers that run after this callback see them
        if state.log_history:
            state.log_history[-1].update(counts)

    def on_train_end(self, args, state, control, **kwargs):
        text = self.stop_watch()
        if text is not None and state.is_world_process_zero:
            print(text)
