"""What `leaky watch` prints while the script runs: one line per finding, when a check pass
first sees it, and one line per story: a finding told under its root (the modules one cut
starves, the flat loss of a layer that died; leaky/story.py) is not announced when its root,
as severe or more, is (`Watch._announce`). The full text (message, change, fix) is the final
report's, printed once.

    step 10: WARNING LK202 update-ratio  2 · train.py:8 · step 10 — no sampled step changed 2.weight by …

The line is the finding's heading as the report shows it, after the step of the pass that
saw it, then a headline: the message's first statement, that is its first sentence up to
the first `: ` or `; ` outside brackets (what is wrong, before why). On a terminal it is cut
with `…` at the width; into a pipe (a CI log) nothing is wrapped or cut (`people_console`).

Info findings are not announced: they are what an audit knows without evidence that training
is impaired, so a line each while the run goes on would be noise; the report lists them.
"""
from __future__ import annotations

import re

from rich.console import Console, ConsoleOptions
from rich.text import Text

from leaky.finding import Finding, Severity
from leaky.report.format import SEVERITY_STYLE, module_label
from leaky.report.terminal import finding_renderable

# a sentence ends at `.`, `!` or `?` before a capital or the end ("4.0e-09", "e.g. the" do not)
_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z(]|\s*$)")
_OPEN, _CLOSE = "([{", ")]}"


def announced(finding: Finding) -> bool:
    """Whether a watch announces the finding live: warnings and errors only."""
    return finding.severity is not Severity.INFO


def headline(message: str) -> str:
    """The message's first statement: its first line and sentence, up to the first `: `
    or `; ` outside brackets (the explanation after it is the report's)."""
    line = message.strip().split("\n", 1)[0]
    end = _SENTENCE_END.search(line)
    sentence = line[:end.start()] if end else line
    depth = 0
    for i, char in enumerate(sentence):
        depth += (char in _OPEN) - (char in _CLOSE)
        if depth == 0 and char in ":;" and sentence[i + 1:i + 2] == " " and i > 0:
            return sentence[:i].rstrip()
    return sentence.rstrip(" .")


class OneLine:
    """Text printed on one line: cut with `…` at a terminal's width; whole where the console
    does not wrap (a pipe). `str()` is its plain text."""

    def __init__(self, text: Text) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text.plain

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        # NOTE: a Text handed to console.print directly loses no_wrap (print joins its texts
        # anew); yielded from here it keeps it.
        if options.no_wrap:
            yield self.text
            return
        text = self.text.copy()
        text.no_wrap, text.overflow = True, "ellipsis"
        yield text


def announcement(finding: Finding, step: int) -> OneLine:
    """One line: the pass's step, the finding's heading as the report shows it, its headline."""
    heading = str(finding_renderable(finding)).split("\n", 1)[0]
    lead = f"step {step}: "
    text = Text(f"{lead}{heading} — {headline(finding.message)}")
    text.stylize("bold", 0, len(lead))
    text.stylize(SEVERITY_STYLE[finding.severity.value], len(lead), len(lead) + len(finding.severity.value))
    return OneLine(text)


def unconfirmed_line(unconfirmed: list[tuple[Finding, Finding | None]]) -> Text:
    """After the report, in one line: the findings announced during the run that the end
    no longer reports, or reports as less severe (`Watch.unconfirmed`: each as announced,
    and as the end reports it, or None)."""
    names = ", ".join(_named(announced, final) for announced, final in unconfirmed)
    many = len(unconfirmed) != 1
    return Text(f"leaky: {len(unconfirmed)} finding{'s' if many else ''} announced during the run "
                f"{'were' if many else 'was'} not confirmed by the end (the evidence changed as the run "
                f"went on): {names}.", style="yellow")


def _named(announced: Finding, final: Finding | None) -> str:
    name = f"{announced.code} {announced.name}"
    if announced.module is not None:
        name += f" in {module_label(announced.module)}"
    if final is not None:
        name += f" (announced as {announced.severity.value}, now {final.severity.value})"
    return name
