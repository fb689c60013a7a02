"""PyTorch Lightning: audit the first steps of `trainer.fit`, watch the rest.

    from leaky.integrations.lightning import LeakyCallback
    trainer = lightning.Trainer(callbacks=[LeakyCallback(audit_steps=20)])

As `leaky watch` does, each warning and error is announced once (rank zero) in one line
(step, code, name, place, headline), and every finding is told in full once, after fit.
The counts are logged through the trainer's loggers as `leaky/findings` and `leaky/errors`,
the findings kept in `store` if given. `callback.report` and `callback.findings` hold the
result after fit.
"""
from __future__ import annotations

from leaky.integrations import require
from leaky.integrations._callback import WatchSettings, live_line

_pl = require("lightning", "lightning").pytorch


class LeakyCallback(_pl.Callback, WatchSettings):
    def __init__(self, *args, **kwargs) -> None:
        _pl.Callback.__init__(self)
        WatchSettings.__init__(self, *args, **kwargs)

    def on_fit_start(self, trainer, pl_module) -> None:
        self.start_watch(lambda f, step: self._announce(trainer, f, step), "lightning", [type(pl_module).__name__])

    def _announce(self, trainer, finding, step) -> None:
        line = live_line(finding, step)
        if line is not None and trainer.is_global_zero:
            _pl.utilities.rank_zero_info(line)
        for logger in trainer.loggers:
            logger.log_metrics(self.counts(), step=step)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._close(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._close(trainer, exception)

    def _close(self, trainer, error: BaseException | None = None) -> None:
        text = self.stop_watch(error)
        if text is not None and trainer.is_global_zero:
            _pl.utilities.rank_zero_info(text)
