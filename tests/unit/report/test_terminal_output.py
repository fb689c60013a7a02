"""What a person reads: the terminal report rendered to a string, at 80 columns on a
terminal and unwrapped into a pipe (a CI log), from real audits of the zoo's examples.

On a terminal a finding's lines stay indented under its heading, wrapped ones too; no table
cuts a word in two. Into a pipe nothing is wrapped, so a command stays on one line."""
from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.text import Text

from leaky.cli import main
from leaky.demo import audit_example
from leaky.report.terminal import (INDENT, finding_renderable, flow_table, people_console, print_report,
                                   report_renderable)
from leaky.zoo import get

BOX = re.compile(r"[\u2500-\u257f]")     # rich's table borders


@pytest.fixture(scope="module")
def report():
    """A real audit with long messages, a cause line and a gradient-flow table."""
    return audit_example(get("sigmoid-big-init"), steps=10)


def on_terminal(renderable, width: int = 80, render=None) -> str:
    """What a terminal `width` columns wide shows; `render(console)` prints it when given."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=True, color_system=None, highlight=False)
    (render or console.print)(console if render else renderable)
    return buffer.getvalue()


def into_pipe(monkeypatch, print_to) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    buffer = io.StringIO()
    print_to(people_console(file=buffer))
    return buffer.getvalue()


def flat(text: str) -> str:
    return " ".join(text.split())


def cut_words(rendered: str, texts) -> list[str]:
    """The words of `texts` that do not appear whole in `rendered` (tables' borders aside)."""
    whole = set(BOX.sub(" ", rendered).split())
    return [word for text in texts for word in str(text).split() if word not in whole]


def table_texts(table) -> list[str]:
    return [str(column.header) for column in table.columns] + \
           [cell.plain if isinstance(cell, Text) else str(cell) for column in table.columns for cell in column.cells]


def finding_blocks(rendered: str) -> dict[str, list[str]]:
    """The rendered lines of each finding shown in full, by its code and name: from its
    heading to the next heading or the table."""
    blocks: dict[str, list[str]] = {}
    block: list[str] = []
    for line in rendered.splitlines():
        heading = re.match(r"(ERROR|WARNING|INFO) +(LK\d{3} [a-z-]+)", line)
        if heading:
            block = blocks.setdefault(heading.group(2), [])
        elif line.startswith("gradient flow"):
            break
        block.append(line)
    return blocks


def shown_in_full(report, blocks) -> list:
    return [f for f in report.findings if f"{f.code} {f.name}" in blocks]


def test_on_a_terminal_every_line_of_a_finding_stays_under_its_heading(report):
    rendered = on_terminal(report_renderable(report))
    blocks = finding_blocks(rendered)
    full = shown_in_full(report, blocks)
    assert len(full) >= 2 and any(len(f.message) + INDENT > 80 for f in full), "no message long enough to wrap"
    for block in blocks.values():
        assert all(len(line) <= 80 for line in block), block
        assert all(line.startswith(" " * INDENT) and line[INDENT] != " " for line in block[1:]), "\n".join(block)
    for finding in full:
        body = flat("\n".join(blocks[f"{finding.code} {finding.name}"]))
        assert flat(finding.message) in body and flat(finding.fix) in body   # no word cut by the wrap


def test_a_watch_announcement_keeps_the_indent_after_its_step():
    from leaky.finding import Finding, Severity, Source

    finding = Finding("dead-units", "LK102", Severity.ERROR, "word " * 40, "fix " * 30, "encoder.layers.3.ffn", "relu",
                      Source("train.py", 12))
    rendered = on_terminal(finding_renderable(finding, lead=Text("step 300: ")))
    lines = rendered.splitlines()
    assert lines[0].startswith("step 300: ERROR   LK102 dead-units")
    assert len(lines) > 4 and all(line.startswith(" " * INDENT) for line in lines[1:])
    assert str(finding_renderable(finding)).startswith("ERROR   LK102 dead-units")   # plain, as testing.py reads it


def test_into_a_pipe_nothing_is_wrapped(report, monkeypatch):
    rendered = into_pipe(monkeypatch, lambda console: print_report(report, console))
    lines = rendered.splitlines()
    full = shown_in_full(report, finding_blocks(rendered))
    assert len(full) >= 2
    for finding in full:
        assert " " * INDENT + finding.message in lines        # the whole message on its one line
        assert " " * INDENT + "fix: " + finding.fix in lines
    assert any(len(line) > 80 for line in lines)


def test_the_demo_s_command_to_copy_stays_on_one_line_in_a_pipe(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    main(["demo", "--only", "sigmoid-big-init", "--steps", "5"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.endswith("leaky fix --example sigmoid-big-init") for line in lines), "\n".join(lines)


@pytest.mark.parametrize("width", [80, 60, 40])
def test_the_gradient_flow_table_cuts_no_word(report, width):
    table = flow_table(report)
    rendered = on_terminal(table, width)
    assert all(len(line) <= width for line in rendered.splitlines())
    assert not cut_words(rendered, table_texts(table.table([r["module"] for r in table.rows])))


@pytest.fixture(scope="module")
def fix_data():
    """A real `leaky fix` result: the clamped DQN's fixes, tried over a few steps."""
    from leaky.fix import FixConfig, try_fixes

    config = FixConfig(steps=30, holdout=5, repeats=1)
    example = get("dqn-clamped-td")
    return try_fixes(lambda: example.run(steps=config.steps + config.holdout + 1, seed=0), config,
                     "dqn-clamped-td").to_dict()


@pytest.mark.parametrize("width", [80, 100, 200])
def test_the_fix_table_cuts_no_word_at_any_width(fix_data, width):
    """At 200 columns the table is as rich lays it out; at 100 rich alone would narrow the
    widest column below `leaky/zoo/karpathy.py:253`, so each column gets a width no less than
    its longest word; at 80 the six columns' words do not fit side by side, and each fix is a
    block of `header  value` lines."""
    from leaky.report.fix import fix_table, render_fix

    assert fix_data["fixes"]
    rendered = on_terminal(None, width, render=lambda console: render_fix(console, fix_data))
    assert all(len(line) <= width for line in rendered.splitlines())
    assert not cut_words(rendered, table_texts(fix_table(fix_data)))
    assert ("┃" in rendered) == (width > 80)       # a table where it fits, blocks where it does not


def test_leaky_show_keeps_a_stored_finding_s_lines_under_its_heading(tmp_path):
    import leaky
    from leaky.report.runs import show_run
    from leaky.store import Store

    with leaky.watch(every=2, store=tmp_path / "runs.db") as run:
        get("sigmoid-big-init").run(steps=10, seed=0)
    with Store(str(tmp_path / "runs.db")) as store:
        rendered = on_terminal(show_run(store, run.run_id))
    listing = rendered.split("findings, in the order they appeared")[1].splitlines()[1:]
    headings = [n for n, line in enumerate(listing) if line.startswith("step ")]
    assert len(headings) >= 2 and headings[0] == 0
    wrapped = [line for line in listing if line and not line.startswith("step ")]
    assert len(wrapped) > 3 * len(headings)     # more lines than message, change and fix: some wrapped
    assert all(line.startswith("    ") and line[4] != " " for line in wrapped), "\n".join(listing)


def test_leaky_show_names_the_step_the_report_names(tmp_path):
    """A watched run's finding has the step it names (LK102: the first unit's death) and the
    step a check pass found it at; `leaky show` leads with the first, as the run's last lines
    and its JSON do, and adds the second where they differ."""
    import leaky
    from leaky.report.runs import show_run
    from leaky.store import Store

    with leaky.watch(every=5, store=tmp_path / "runs.db") as run:
        get("relu-high-lr").run(steps=40, seed=0)
    with Store(str(tmp_path / "runs.db")) as store:
        rendered = on_terminal(show_run(store, run.run_id), width=300)
        stored = {(f["code"], f["module"]): f for f in store.findings(run.run_id)}
    named = [f for f in run.report.findings if f.step is not None]
    assert named and any(f.step != stored[(f.code, f.module)]["first_step"] for f in named)
    headings = [line for line in rendered.splitlines() if line.startswith("step ")]
    for f in named:
        first = stored[(f.code, f.module)]["first_step"]
        line = next(h for h in headings if f" {f.code} " in h and (f.module or "") in h)
        assert line.startswith(f"step {f.step} "), line
        assert (f"found at step {first}" in line) == (first != f.step), line
