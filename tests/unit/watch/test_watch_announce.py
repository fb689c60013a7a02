"""`leaky watch` tells each finding in full once: one line on stderr when a check pass first
sees it (warnings and errors; infos wait for the report), the full text in the final report,
and one line there for what was announced but is no longer reported at the end."""
from __future__ import annotations

import dataclasses
import io
import json
import re

import torch
from rich.console import Console
from torch import nn

import leaky
from leaky.cli import main
from leaky.finding import Finding, Severity, Source
from leaky.report.announce import announcement, headline, unconfirmed_line
from leaky.report.terminal import people_console
from leaky.watch import Watch

TRAIN = """
import torch
from torch import nn
torch.manual_seed(0)
{build}
opt = torch.optim.SGD(model.parameters(), lr={lr})
x = torch.randn(256, {inputs})
y = x[:, :4].argmax(1)
for step in range(40):
    {each_step}
    rows = torch.arange(step * 32, step * 32 + 32) % 256
    loss = nn.functional.cross_entropy(model(x[rows]), y[rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# ten sigmoid layers: the gradient vanishes (LK103), and the weights it starves stay put
SIGMOID = TRAIN.format(build="model = nn.Sequential(*[m for _ in range(10) for m in (nn.Linear(32, 32), nn.Sigmoid())], "
                             "nn.Linear(32, 4))", lr=0.01, inputs=32, each_step="pass")
RELU = "model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))"
HEALTHY = TRAIN.format(build=RELU, lr=0.05, inputs=16, each_step="pass")
# every unit of the second ReLU is dead from the start (bias -20) ...
DEAD = TRAIN.format(build=RELU + "\nnn.init.constant_(model[2].bias, -20.0)", lr=0.05, inputs=16, each_step="pass")
# ... until the script itself resets the bias at step 25: by the end they fire again. (The
# pass at step 20 is the first whose 21 losses can say the loss does not fall: before it, the
# error is provisional, LK102's "the live units carry the fit", and not announced.)
REVIVED = TRAIN.format(build=RELU + "\nnn.init.constant_(model[2].bias, -20.0)", lr=0.05, inputs=16,
                       each_step="if step == 25:\n        torch.nn.init.zeros_(model[2].bias)")
# 20 of 64 units dead (31%): below the warning share, an info
SOME_DEAD = TRAIN.format(build="model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))\n"
                               "nn.init.constant_(model[0].bias[:20], -20.0)", lr=0.05, inputs=16, each_step="pass")
NOT_CONFIRMED = "announced during the run"


def watch(tmp_path, capsys, script: str) -> tuple[int, str, str, list[dict]]:
    """`leaky watch --every 1` on the script: exit status, stdout, stderr, the JSON findings."""
    path, report = tmp_path / "train.py", tmp_path / "report.json"
    path.write_text(script)
    status = main(["watch", "--every", "1", "--store", str(tmp_path / "runs.db"), "--json", str(report),
                   "--no-table", str(path)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err, json.loads(report.read_text())["findings"]


def live_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if re.match(r"step \d+: ", line)]


def test_each_finding_is_one_live_line_then_told_in_full_once_in_the_report(tmp_path, capsys):
    status, out, err, findings = watch(tmp_path, capsys, SIGMOID)
    assert status == 1
    assert "LK103" in {f["code"] for f in findings} and all(f["severity"] != "info" for f in findings)
    live = live_lines(err)
    roots = [f for f in findings if not _told_under_another(f, findings)]
    assert len(roots) < len(findings) and len(live) == len(roots), err   # one line per story, no more
    for f in findings:
        heading = f"{f['code']} {f['name']}  {f['module']} "
        said = sum(line.split(": ", 1)[1].startswith(f"{f['severity'].upper():7} {heading}") for line in live)
        assert said == (f in roots), (heading, live)   # what a root explains is told under its line
        assert f["fix"] not in err                    # no full text before the report
        assert out.count(f["message"]) <= 1 and out.count("fix: " + f["fix"]) <= 1
    assert "fix:" not in err and "change:" not in err
    assert all(not line.startswith(" ") for line in err.splitlines()), err   # no continuation lines
    (root,) = [f for f in findings if f["code"] == "LK103"]
    assert out.count(root["message"]) == 1 and out.count("fix: " + root["fix"]) == 1
    assert NOT_CONFIRMED not in out


def _told_under_another(finding: dict, findings: list[dict]) -> bool:
    """Whether the JSON finding is part of another's story (leaky/story.py's `explains`)."""
    named = finding["evidence"].get("explained_by") or ()
    return any(other is not finding and (other["code"] in named or any(
        isinstance(e, dict) and (e.get("code"), e.get("module")) == (finding["code"], finding["module"])
        for e in other["evidence"].get("explains") or ())) for other in findings)


def test_a_healthy_watch_announces_nothing(tmp_path, capsys):
    status, out, err, findings = watch(tmp_path, capsys, HEALTHY)
    assert (status, findings, live_lines(err)) == (0, [], [])
    assert "No leaks found" in out and NOT_CONFIRMED not in out


def test_info_findings_are_not_announced_live_but_are_in_the_report(tmp_path, capsys):
    status, out, err, findings = watch(tmp_path, capsys, SOME_DEAD)
    assert status == 0
    assert [(f["code"], f["severity"]) for f in findings] == [("LK102", "info")]
    assert live_lines(err) == [], err
    assert out.count("fix: " + findings[0]["fix"]) == 1


def test_a_finding_the_end_no_longer_reports_is_named_in_one_line(tmp_path, capsys):
    status, out, err, findings = watch(tmp_path, capsys, REVIVED)
    (line,) = live_lines(err)
    assert "ERROR   LK102 dead-units  3 · relu" in line
    assert findings == [] and status == 0
    (said,) = [line for line in out.splitlines() if NOT_CONFIRMED in line]
    assert said == ("leaky: 1 finding announced during the run was not confirmed by the end "
                    "(the evidence changed as the run went on): LK102 dead-units in 3.")


def test_units_that_stay_dead_are_confirmed(tmp_path, capsys):
    status, out, err, findings = watch(tmp_path, capsys, DEAD)
    live = live_lines(err)
    assert status == 1 and len(live) == 1 and len(findings) == 2   # the flat loss is told under the dead units
    assert "LK102 dead-units  3 · relu" in live[0]
    (dead,) = [f for f in findings if f["code"] == "LK102"]
    assert out.count("fix: " + dead["fix"]) == 1 and NOT_CONFIRMED not in out


def test_the_python_api_prints_nothing_and_keeps_the_findings(capsys):
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(10) for m in (nn.Linear(32, 32), nn.Sigmoid())], nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 32)
    y = x[:, :4].argmax(1)
    with leaky.watch(every=1) as run:
        for _ in range(15):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert "LK103" in {f.code for f in run.findings}
    assert run.unconfirmed == []
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")


def _finding(severity: Severity, message: str = "100% of fc's 64 relu units output 0; so no gradient") -> Finding:
    return Finding("dead-units", "LK102", severity, message, "use LeakyReLU " * 10, "encoder.layers.3.ffn", "relu",
                   Source("train.py", 12))


def test_a_finding_that_rises_to_a_warning_is_announced_again_as_the_warning():
    announced = []
    run = Watch(every=1, on_finding=lambda f, step: announced.append((step, f.severity)))
    for step, severity in [(0, Severity.INFO), (10, Severity.INFO), (20, Severity.WARNING), (30, Severity.INFO),
                           (40, Severity.ERROR)]:
        run._announce([_finding(severity)], step)
    assert announced == [(0, Severity.INFO), (20, Severity.WARNING), (40, Severity.ERROR)]


def test_the_live_line_is_cut_at_a_terminal_s_width_and_whole_in_a_pipe():
    finding = dataclasses.replace(_finding(Severity.ERROR, "word " * 30 + "; why"), module="fc")
    line = announcement(finding, 300)
    buffer = io.StringIO()
    Console(file=buffer, width=80, force_terminal=True, color_system=None).print(line)
    (shown,) = buffer.getvalue().splitlines()
    assert shown.startswith("step 300: ERROR   LK102 dead-units  fc · relu · train.py:12 — word word")
    assert len(shown) == 80 and shown.endswith("…")
    buffer = io.StringIO()
    people_console(file=buffer).print(line)       # a file: not a terminal
    assert buffer.getvalue() == str(line) + "\n" and str(line).endswith(("word " * 30).rstrip())


def test_the_headline_is_the_first_statement():
    assert headline("the gradient entering 0 is 4.0e-09 of the one entering 20 (8.4 orders lost). Most is lost "
                    "at: x") == "the gradient entering 0 is 4.0e-09 of the one entering 20 (8.4 orders lost)"
    assert headline("no step changed 2.weight by more than 2e-12× its norm (||Δw||/||w||; ~1e-3 is typical): "
                    "frozen") == "no step changed 2.weight by more than 2e-12× its norm (||Δw||/||w||; ~1e-3 is typical)"
    assert headline("100% of units output 0; relu'(x) = 0, e.g. here. Next") == "100% of units output 0"
    assert headline("set where SGD is built (sig.py:8).\nmore") == "set where SGD is built (sig.py:8)"


def test_the_unconfirmed_line_says_what_the_end_reports_instead():
    line = unconfirmed_line([(_finding(Severity.WARNING), _finding(Severity.INFO)), (_finding(Severity.ERROR), None)])
    assert str(line.plain) == ("leaky: 2 findings announced during the run were not confirmed by the end (the evidence "
                               "changed as the run went on): LK102 dead-units in encoder.layers.3.ffn (announced as "
                               "warning, now info), LK102 dead-units in encoder.layers.3.ffn.")
