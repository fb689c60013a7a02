"""The page of `leaky diff A B` (leaky/report/html/diff.py) from hand-built `leaky/diff-v1` dicts.

Rendering is all this tests, so the input is built by hand: a run whose second Linear parts
from the first at step 7 of the loss, two configuration rows, sites of every status. The page
must parse, close every <svg>, draw A and B as two polylines in both charts, mark step 7, and
escape the user's strings; "same", "unusable" and a dict without its optional keys render too.
"""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from leaky.report.html import render_diff_html
from leaky.report.html.linechart import LEFT, RIGHT
from leaky.report.html.svg import Scale, coord

XSS = "<script>alert(1)</script>"
STEPS = 12
PARTED_AT = 7


def _side(site: int, op: str, module: str | None, line: int) -> dict:
    return {"site": site, "op": op, "module": module, "source": {"file": "/proj/train.py", "line": line}}


def _finding(code: str, name: str, module: str, line: int) -> dict:
    return {"code": code, "name": name, "severity": "warning", "module": module, "op": "sigmoid",
            "source": {"file": "/proj/train.py", "line": line}, "message": f"{name} at {module}",
            "fix": "lower the initial weights", "evidence": {"saturated_share": 0.92}}


def _site(status: str, a: dict | None, b: dict | None, meaning: str) -> dict:
    return {"status": status, "a": a, "b": b, "differences": [], "meaning": meaning, "change": None,
            "explained_by": []}


def _parted() -> dict:
    site = _site("parted", _side(3, "sigmoid", "encoder.act", 21), _side(3, "sigmoid", "encoder.act", 24),
                 "B's gradient at encoder.act is 40× smaller than A's")
    site["differences"] = [
        {"stat": "grad_norm", "a": 0.31, "b": 0.0077, "noise": 0.02, "meaning": "the gradient arriving"},
        {"stat": "saturated_share", "a": 0.04, "b": 0.91, "noise": 0.03, "meaning": "units saturated"}]
    site["change"] = {"file": "/proj/train.py", "line": 17, "what": "init std 0.02 → 2.0"}
    site["explained_by"] = [dict(_finding("LK101", "saturated-activation", "encoder.act", 24), run="B")]
    return site


def _loss() -> dict:
    a = [2.3 - 0.1 * s for s in range(STEPS)]
    b = a[:PARTED_AT] + [a[PARTED_AT - 1] - 0.01 * (s - PARTED_AT + 1) for s in range(PARTED_AT, STEPS)]
    return {"optimizer": 0, "a": a, "b": b[:-1] + [None], "parted_at": PARTED_AT, "noise": 0.05,
            "meaning": "B's loss stops falling"}


def diff_dict() -> dict:
    parted = _parted()
    sites = [_site("same", _side(0, "cross_entropy", "", 30), _side(0, "cross_entropy", "", 33), "same"),
             _site("same", _side(1, "linear", "head", 19), _side(1, "linear", "head", 22), "same"),
             _site("changed_op", _side(2, "relu", "encoder.mid", 20), _side(2, "gelu", "encoder.mid", 23),
                   "relu in A, gelu in B"),
             parted,
             _site("only_a", _side(4, "dropout", "encoder.drop", 18), None, "A drops out, B does not"),
             _site("only_b", None, _side(4, "layer_norm", "encoder.norm", 20), "B normalises, A does not")]
    flow = [{"label": "<loss> · cross_entropy", "a": 1.0, "b": 1.0, "parted": False},
            {"label": "head · linear", "a": 0.8, "b": 0.75, "parted": False},
            {"label": "encoder.mid · relu|gelu", "a": 0.5, "b": 0.4, "parted": False},
            {"label": "encoder.act · sigmoid", "a": 0.31, "b": 0.0077, "parted": True},
            {"label": "encoder.drop · dropout", "a": 0.2, "b": None, "parted": False},
            {"label": "encoder.in · linear", "a": 0.1, "b": 0.0002, "parted": True}]
    return {
        "schema": "leaky/diff-v1", "leaky_version": "0.9.0", "torch_version": "2.4.0",
        "a": {"label": "runs/baseline", "kind": "stored", "steps": STEPS, "status": "ok"},
        "b": {"label": "runs/big-init", "kind": "stored", "steps": STEPS, "status": "ok"},
        "verdict": "parted", "reason": None,
        "noise": {"source": "reruns", "reruns": 3, "detail": "seeds 0, 1, 2"},
        "first_parted": parted, "sites": sites, "loss": [_loss()],
        "config": [{"what": "init std", "a": "0.02", "b": "2.0", "source_a": {"file": "/proj/train.py", "line": 14},
                    "source_b": {"file": "/proj/train.py", "line": 17}},
                   {"what": "optimizer", "a": "AdamW(lr=3e-4)", "b": None, "source_a": None, "source_b": None}],
        "findings": {"only_a": [], "only_b": [_finding("LK101", "saturated-activation", "encoder.act", 24)],
                     "both": [_finding("LK201", "loss-plateau", "", 30)]},
        "flow": flow,
    }


VOID = {"meta", "br", "hr", "img", "input", "link", "wbr"}


class _Checker(HTMLParser):
    """Parses the page: every element closed in order (the void ones aside), <svg> counted,
    the text gathered."""

    def __init__(self):
        super().__init__()
        self.open: list[str] = []
        self.errors: list[str] = []
        self.svgs = 0
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.svgs += tag == "svg"
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.svgs += tag == "svg"

    def handle_endtag(self, tag):
        if not self.open or self.open.pop() != tag:
            self.errors.append(f"</{tag}> at {self.getpos()}")

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Checker:
    """The page parsed; every element it opened is closed, in order."""
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert not checker.errors and not checker.open, (checker.errors[:3], checker.open[-3:])
    return checker


def _svg(page: str, kind: str) -> list[str]:
    return re.findall(rf'<svg class="chart {kind}".*?</svg>', page, re.S)


def _polyline_colours(svg: str) -> set[str]:
    return set(re.findall(r'<polyline [^>]*stroke="(#[0-9a-f]{6})"', svg))


@pytest.fixture(scope="module")
def page() -> str:
    return render_diff_html(diff_dict())


def test_page_parses_and_closes_every_svg(page):
    assert _parse(page).svgs == len(re.findall("</svg>", page)) == 2
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page


def test_head_names_both_runs_the_verdict_and_the_noise(page):
    text = "".join(_parse(page).text)
    assert "leaky diff: A against B" in text
    assert "runs/baseline" in text and "runs/big-init" in text
    assert "B parts from A at encoder.act · sigmoid · /proj/train.py:24" in text
    assert "noise, from 3 reruns of A: seeds 0, 1, 2" in text


def test_first_parted_site_on_both_sides(page):
    section = page[page.index('<section id="parted">'):page.index('<section id="flow">')]
    assert "encoder.act" in section and "train.py:21" in section and "train.py:24" in section
    assert section.count("<tr><td>") == 2                          # both differences
    assert "0.0077" in section and "units saturated" in section
    assert "init std 0.02 → 2.0" in section and "train.py:17" in section
    assert "LK101" in section and "saturated-activation" in section
    assert '<span class="side run-b">B</span>' in section              # the run it is from


def test_flow_overlays_a_and_b_and_marks_the_first_parted_site(page):
    [flow] = _svg(page, "diff-flow")
    assert len(_polyline_colours(flow)) == 2                      # A's and B's, in two colours
    # B has no norm at the dropout (only in A): its line stops there, and its input site is a lone dot
    assert flow.count('<polyline ') == 2
    run_b = flow[flow.index('<g class="series run-b">'):]
    assert run_b.count("<circle ") == 5 and run_b.count("<polyline ") == 1
    assert flow.count('<g class="row parted">') == 2
    assert flow.count("◆") == 1 and "◆ encoder.act · sigmoid" in flow
    legend = page[page.index('<section id="flow">'):page.index('<figure', page.index('<section id="flow">'))]
    assert "A: runs/baseline" in legend and "B: runs/big-init" in legend


def test_loss_overlays_a_and_b_with_a_marker_at_the_parting_step(page):
    [loss] = _svg(page, "diff-loss")
    assert len(_polyline_colours(loss)) == 2
    assert loss.count('<g class="marker">') == 1
    assert f"<title>step {PARTED_AT}: B parts from A</title>" in loss
    width = int(re.search(r'width="(\d+)"', loss).group(1))
    x = Scale(0, STEPS - 1, LEFT, width - RIGHT)(PARTED_AT)
    assert f'B parts from A</title><line x1="{coord(x)}"' in loss
    assert f"B parts from A at step {PARTED_AT}" in page


def test_config_sites_and_findings_tables(page):
    config = page[page.index('<section id="config">'):page.index('<section id="sites">')]
    assert config.count("<tr><td>") == 2 and "AdamW(lr=3e-4)" in config and "not set" in config
    assert "train.py:14" in config and "train.py:17" in config
    sites = page[page.index('<section id="sites">'):page.index('<section id="findings">')]
    for status, words in (("parted", "parted"), ("same", "same"), ("only_a", "only in A"),
                          ("only_b", "only in B"), ("changed_op", "changed op")):
        assert f'<span class="status st-{status}">{words}</span>' in sites
    assert sites.count("<tr class=") == 6
    findings = page[page.index('<section id="findings">'):]
    assert "Only in B" in findings and "Only in A" not in findings and "1 more is in both runs" in findings
    assert findings.count('<section class="finding') == 1


def test_hostile_labels_are_escaped():
    data = diff_dict()
    data["a"]["label"] = XSS
    data["flow"][0]["label"] = XSS
    data["first_parted"]["a"]["module"] = XSS
    data["config"][0]["b"] = XSS
    page = render_diff_html(data)
    assert XSS not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\\u003cscript\\u003e" in page                          # the embedded JSON copy
    _parse(page)


def test_same_verdict_has_no_parted_section():
    data = diff_dict()
    data.update(verdict="same", first_parted=None)
    for row in data["flow"]:
        row["parted"] = False
    data["loss"][0]["parted_at"] = None
    page = render_diff_html(data)
    assert "no difference beyond the noise" in page
    assert '<section id="parted">' not in page and '<g class="marker">' not in page
    [flow] = _svg(page, "diff-flow")
    assert "◆" not in flow and '<g class="row parted">' not in flow
    assert _parse(page).svgs == 2


def test_a_parted_loss_without_a_parted_site():
    data = diff_dict()
    data["first_parted"] = None
    page = render_diff_html(data)
    assert f"B parts from A at <b>step {PARTED_AT} of the loss</b>" in page
    assert '<section id="parted">' not in page
    _parse(page)


def test_unusable_verdict_says_why():
    page = render_diff_html({"schema": "leaky/diff-v1", "verdict": "unusable",
                             "reason": "A has no gradient records (a report made with --no-grad)",
                             "a": {"label": "a.json"}, "b": {"label": "b.json"}})
    assert "no comparison: A has no gradient records (a report made with --no-grad)" in page
    assert "<svg" not in page
    _parse(page)


@pytest.mark.parametrize("missing", ["flow", "loss", "noise", "config", "sites", "findings", "a", "b",
                                     "first_parted"])
def test_optional_keys_may_be_missing(missing):
    data = diff_dict()
    del data[missing]
    data.pop("flow", None)
    data.pop("loss", None)
    page = render_diff_html(data)
    assert _parse(page).svgs == 0
    assert "leaky diff: A against B" in page


def test_empty_dict_renders():
    page = render_diff_html({})
    assert "leaky diff: A against B" in page and "no verdict" in page
    _parse(page)
