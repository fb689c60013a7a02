"""What the Lightning and Hugging Face callbacks share: their settings and their watch."""
from __future__ import annotations

from typing import Callable

from leaky.watch import DEFAULT_EVERY, Watch


class WatchSettings:
    """audit_steps observed in detail first, then every `every`-th step; store, fail_fast
    and tensorboard as in `leaky.watch`. `.report` and `.findings` after training."""

    def __init__(self, audit_steps: int = 20, every: int = DEFAULT_EVERY, store=None, fail_fast: bool = False,
                 tensorboard=None) -> None:
        self.audit_steps, self.every, self.store = audit_steps, every, store
        self.fail_fast, self.tensorboard = fail_fast, tensorboard
        self.watch: Watch | None = None
        self.report = None

    @property
    def findings(self):
        return [] if self.report is None else list(self.report.findings)

    def start_watch(self, on_finding: Callable, script: str, argv: list[str]) -> Watch:
        sinks = []
        if self.tensorboard is not None:
            from leaky.integrations.tensorboard import TensorBoardSink

            sinks.append(TensorBoardSink(self.tensorboard))
        self.watch = Watch(every=self.every, store=self.store, fail_fast=self.fail_fast, audit_steps=self.audit_steps,
                           on_finding=on_finding, sinks=sinks, script=script, argv=argv)
        self.watch.__enter__()
        return self.watch

    def stop_watch(self, error: BaseException | None = None) -> None:
        if self.watch is not None:
            watch, self.watch = self.watch, None
            watch.__exit__(type(error) if error else None, error, None)
            self.report = watch.report

    def counts(self) -> dict[str, float]:
        seen = self.watch.seen.values() if self.watch is not None else ()
        return {"leaky/findings": float(len(self.watch.seen) if self.watch else 0),
                "leaky/errors": float(sum(1 for f in seen if f.severity.value == "error"))}
