"""What the Lightning and Hugging Face callbacks share: their settings, their watch, and what
they tell a person. As `leaky watch` does, each warning and error is announced live in one
line (report/announce.py: step, code, name, place, headline); the full text of every finding,
told as stories, comes once at the end (`closing_text`), and stays in `.report` and its JSON."""
from __future__ import annotations

from typing import Callable

from leaky.watch import DEFAULT_SHARE, Watch, watch_sinks


class WatchSettings:
    """audit_steps observed in detail first, then as many steps as the overhead budget pays
    for (`overhead`, a share of the training time), or every `every`-th step; store,
    fail_fast and tensorboard as in `leaky.watch`. `.report` and `.findings` after training."""

    def __init__(self, audit_steps: int = 20, every: int | None = None, store=None, fail_fast: bool = False,
                 tensorboard=None, overhead: float = DEFAULT_SHARE) -> None:
        self.audit_steps, self.every, self.store, self.overhead = audit_steps, every, store, overhead
        self.fail_fast, self.tensorboard = fail_fast, tensorboard
        self.watch: Watch | None = None
        self.report = None

    @property
    def findings(self):
        return [] if self.report is None else list(self.report.findings)

    def start_watch(self, on_finding: Callable, script: str, argv: list[str]) -> Watch:
        self.watch = Watch(every=self.every, overhead=self.overhead, store=self.store, fail_fast=self.fail_fast,
                           audit_steps=self.audit_steps,
                           on_finding=on_finding, sinks=watch_sinks(self.tensorboard), script=script, argv=argv)
        self.watch.__enter__()
        return self.watch

    def stop_watch(self, error: BaseException | None = None) -> str | None:
        """End the watch; return the closing text to print (None if it had ended already)."""
        if self.watch is None:
            return None
        watch, self.watch = self.watch, None
        watch.__exit__(type(error) if error else None, error, None)
        self.report = watch.report
        return closing_text(watch)

    def counts(self) -> dict[str, float]:
        seen = self.watch.seen.values() if self.watch is not None else ()
        return {"leaky/findings": float(len(self.watch.seen) if self.watch else 0),
                "leaky/errors": float(sum(1 for f in seen if f.severity.value == "error"))}


def live_line(finding, step: int) -> str | None:
    """`leaky watch`'s line for a new warning or error, after `leaky: `; None for an info
    (the report at the end tells it)."""
    from leaky.report.announce import announced, announcement

    return f"leaky: {announcement(finding, step)}" if announced(finding) else None


def closing_text(watch: Watch) -> str:
    """The report as `leaky watch` ends it, without the flow table: the summary, each story in
    full, and the line for what was announced live but is no longer reported."""
    from leaky.report.announce import announced, unconfirmed_line
    from leaky.report.terminal import render_text

    text = "\n".join(line.rstrip() for line in render_text(watch.report, table=False).rstrip("\n").split("\n"))
    unconfirmed = [(said, now) for said, now in watch.unconfirmed if announced(said)]
    return text + ("\n" + unconfirmed_line(unconfirmed).plain if unconfirmed else "")
