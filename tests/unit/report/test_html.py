"""The HTML report: structure, charts, escaping, size, and a headless-browser check.

Real reports come from the zoo (sigmoid-big-init: saturation and collapse; rnn-exploding:
a recurrence; relu-high-lr: dead units) and one watched run kept in a store. The browser
tests use Debian's chromium (tests/browser.py installs it when missing, or skips).
"""
from __future__ import annotations

import html
import json
import re
import time

import numpy as np
import pytest
import torch

import leaky
from leaky.demo import audit_example
from leaky.report import _clean
from leaky.report.html import render_html, run_payload, write_html
from leaky.store import Store
from leaky.zoo import get
from tests.browser import console_errors, decode_png, find_chromium, run_chromium

XSS = "<script>alert(1)</script>"
XSS2 = '"><img src=x onerror=alert(1)>'
FINDING_RE = re.compile(r'<section class="finding sev-(\w+)" id="finding-(\d+)" data-code="([^"]*)"')
DATA_RE = re.compile(r'<script type="application/json" id="leaky-data">(.*?)</script>', re.S)


def _audit(name: str) -> dict:
    torch.manual_seed(0)
    return audit_example(get(name), 10).to_dict()


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    return {name: _audit(name) for name in ("sigmoid-big-init", "rnn-exploding", "relu-high-lr")}


@pytest.fixture(scope="module")
def watched(tmp_path_factory) -> tuple[dict, dict]:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("watch") / "runs.db"
    with leaky.watch(every=5, store=path) as w:
        get("relu-high-lr").run(steps=40)
    with Store(path) as store:
        payload = run_payload(store, w.run_id)
    return w.report.to_dict(), payload


def _charts(page: str, kind: str) -> int:
    return page.count(f'<svg class="chart {kind}"')


# -- structure ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sigmoid-big-init", "rnn-exploding", "relu-high-lr"])
def test_one_section_per_finding_in_order(reports, name):
    report = reports[name]
    page = render_html(report)
    shown = FINDING_RE.findall(page)
    assert report["findings"], "the zoo example should have findings"
    assert len(shown) == len(report["findings"])
    assert [code for _, _, code in shown] == [f["code"] for f in report["findings"]]
    assert [sev for sev, _, _ in shown] == [f["severity"] for f in report["findings"]]
    assert [int(i) for _, i, _ in shown] == list(range(1, len(shown) + 1))
    assert page.index('id="findings"') < page.index('id="flow"')      # findings come first
    for f in report["findings"]:
        assert html.escape(f["message"]) in page
        assert html.escape(f["fix"]) in page
        for key in f["evidence"]:
            assert f"<th scope=\"row\">{html.escape(key)}</th>" in page


def test_finding_shows_the_source_line(reports):
    report = reports["sigmoid-big-init"]
    f = report["findings"][0]
    with open(f["source"]["file"], encoding="utf-8") as fh:
        line = fh.read().splitlines()[f["source"]["line"] - 1]
    page = render_html(report)
    section = page[page.index('id="finding-1"'):page.index('id="finding-2"')]
    highlighted = re.search(r'<span class="hl"><span class="ln">\s*(\d+)</span> (.*?)</span>', section)
    assert highlighted and int(highlighted.group(1)) == f["source"]["line"]
    assert highlighted.group(2) == html.escape(line.expandtabs(4))
    assert section.count('<span class="ln">') == 7           # 3 lines either side
    assert f"{f['module']}</span> · <span class=\"op\">{f['op']}" in section


def test_charts_for_flow_histograms_and_recurrences(reports):
    sigmoid = render_html(reports["sigmoid-big-init"])
    assert _charts(sigmoid, "flow") == 1
    assert _charts(sigmoid, "hist") == len(reports["sigmoid-big-init"]["activations"]) == 3
    assert sigmoid.count('<g class="row ') == len(reports["sigmoid-big-init"]["modules"])
    # coloured where a finding judged the gradient lost: act1 (LK101 saturated, LK103's worst
    # loss, gain 0.012) and act2, act3 (LK103's next losses); not the loss's mean (gain 0.12)
    collapse = re.findall(r'<g class="row collapse" data-codes="([^"]*)"><title>([^<]*)</title>', sigmoid)
    assert [(codes, title.split(" ")[0]) for codes, title in collapse] == \
        [("LK103", "act3"), ("LK103", "act2"), ("LK101 LK103", "act1")]
    assert "flat region" in sigmoid

    rnn = reports["rnn-exploding"]
    page = render_html(rnn)
    assert rnn["recurrences"] and rnn["recurrences"][0]["time_profile"]
    assert _charts(page, "recurrence") == len(rnn["recurrences"])
    assert re.search(r'<g class="row explosion" data-codes="LK105"><title>rnn \(RNN\)', page)

    relu = reports["relu-high-lr"]
    page = render_html(relu)
    assert _charts(page, "hist") == len(relu["activations"]) == 2
    assert page.count(">never</text>") == 2                    # the dead-unit slot of each histogram
    assert _charts(page, "loss") == 1                          # the audit's per-step series


def test_watched_run_has_heatmap_loss_and_layer_series(watched):
    report, payload = watched
    page = render_html(report, payload)
    assert len(FINDING_RE.findall(page)) == len(report["findings"])
    for kind in ("flow", "heatmap", "loss", "dead", "update", "gradnorm"):
        assert _charts(page, kind) == 1, kind
    stats = payload["module_stats"]
    steps = {s["step"] for s in stats}
    modules = {s["module"] for s in stats}
    heatmap = page[page.index('<svg class="chart heatmap"'):]
    heatmap = heatmap[:heatmap.index("</svg>")]
    assert heatmap.count('<g class="hrow">') == len(modules)
    assert heatmap.count("<rect") == len(modules) * len(steps) + 24       # cells + colour bar
    # every stored finding is marked on the loss curve at its first step and listed under it
    assert page.count('<li class="run-finding">') == len(payload["findings"])
    first_steps = {f["first_step"] for f in payload["findings"]}
    loss = page[page.index('<svg class="chart loss"'):]
    assert loss[:loss.index("</svg>")].count('<g class="marker">') == len(first_steps)
    assert "first seen at step" in page
    assert f"run {payload['run']['id']}" in page
    # what the watch cost, in the words of its last line and of `leaky show`
    assert '<p class="facts overhead">leaky watch cost ' in page and "(--every 5)" in page
    assert '<p class="facts overhead">' not in render_html(_audit("relu-high-lr"))   # an audit has no such line


def test_no_network_references(reports, watched):
    pages = [render_html(r) for r in reports.values()] + [render_html(*watched)]
    for page in pages:
        assert "http://" not in page and "https://" not in page
        assert "<link" not in page and "@import" not in page and "url(" not in page
        assert not re.search(r"<(img|iframe|object|embed)\b", page)
        assert not re.search(r'\ssrc=', page)
        assert page.count("<script") == 2            # the JSON copy and the print helper


def test_embedded_json_is_the_report(reports):
    report = reports["sigmoid-big-init"]
    page = render_html(report)
    blob = DATA_RE.search(page).group(1)
    assert "<" not in blob and ">" not in blob and "&" not in blob
    assert json.loads(blob) == json.loads(json.dumps(report))


# -- escaping -----------------------------------------------------------------------------
def _hostile() -> tuple[dict, dict]:
    src = {"file": f"/nonexistent/{XSS}{XSS2}.py", "line": 3}
    finding = {"name": XSS, "code": XSS2, "severity": "error", "module": XSS, "op": XSS2, "source": src,
               "step": 2, "message": f"message {XSS} and {XSS2}", "fix": f"fix {XSS}{XSS2}",
               "evidence": {XSS: XSS2, XSS2: [XSS, {XSS: XSS2}], "rows": [{XSS: XSS2}], "n": 1.5}}
    module = {"module": XSS, "type": XSS2, "order": 1, "grad_norm": 0.5, "gain": 0.01, "zeroed_share": None,
              "dead_share": 0.5, "saturated_share": None, "ops": 1}
    report = {
        "schema": "leaky/report-v1", "leaky_version": XSS, "torch_version": XSS2,
        "run": {"steps": 3, "backward_calls": 3, "script": XSS, "argv": [XSS2, XSS], "status": "failed",
                "error": XSS, "internal_error": XSS2},
        "findings": [finding],
        "modules": [module, {**module, "module": XSS2, "gain": 20.0}],
        "ops": [{"site": 0, "op": XSS, "node": XSS2, "module": XSS, "source": src, "gain": 1.0}],
        "parameters": [{"name": XSS, "module": XSS2, "shape": [2, 2], "grad_norm": 1.0}],
        "recurrences": [{"module": XSS, "param": XSS2, "kind": XSS, "spectral_radius": 2.0, "time_steps": 3,
                         "time_profile": [3.0, 2.0, 1.0]}],
        "activations": [{"site": 1, "op": XSS, "family": XSS2, "module": XSS, "source": src, "units": 2,
                         "samples_per_unit": 4, "dead_share": 0.5,
                         "histogram": {"kind": "fire_rate", "edges": [0, 0.5, 1], "counts": [1, 1], "never": 1}}],
        "series": [{"step": 0, "loss": 1.0, "grad_norm": 1.0, "lr": 0.1}],
    }
    run = {"run": {"id": 1, "script": XSS, "argv": [XSS2], "status": "failed", "error": XSS, "device": XSS2,
                   "torch_version": XSS, "git_commit": XSS2, "started": 0.0, "steps": 2},
           "steps": [{"step": 0, "loss": 1.0, "grad_norm": 1.0, "nonfinite": False},
                     {"step": 1, "loss": None, "grad_norm": None, "nonfinite": True}],
           "module_stats": [{"step": 0, "module": XSS, "grad_norm": 1.0, "gain": 1.0, "dead_share": 0.5,
                             "saturated_share": None, "update_ratio": 0.01},
                            {"step": 0, "module": XSS2, "grad_norm": 0.1, "gain": 1.0, "dead_share": None,
                             "saturated_share": None, "update_ratio": 0.001}],
           "findings": [{**finding, "first_step": 0, "last_step": 1}]}
    return report, run


def test_everything_from_the_program_is_escaped():
    report, run = _hostile()
    page = render_html(report, run, title=XSS)
    assert "<script>alert" not in page
    assert "<img" not in page
    assert "onerror=alert(1)>" not in page
    assert html.escape(XSS) in page                   # shown as text
    assert html.escape(XSS2) in page
    assert page.count("<script") == 2
    assert len(FINDING_RE.findall(page)) == 1
    blob = DATA_RE.search(page).group(1)
    assert json.loads(blob) == _clean(report)


def test_title_and_argv_escaped_without_run():
    report, _ = _hostile()
    page = render_html(report, title=XSS2)
    assert "<img" not in page and "<script>alert" not in page
    assert f"<title>{html.escape(XSS2)}</title>" in page


# -- source snippets ----------------------------------------------------------------------
def test_snippet_from_a_file_and_none_when_unreadable(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("".join(f"line_{i} = {i}\n" for i in range(1, 11)) + f"# {XSS}\n", encoding="utf-8")
    base = {"name": "dead-zone", "code": "LK106", "severity": "warning", "module": "m", "op": "clamp",
            "step": None, "message": "m", "fix": "f", "evidence": {}}
    page = render_html({"findings": [{**base, "source": {"file": str(script), "line": 9}}]})
    assert '<span class="hl"><span class="ln"> 9</span> line_9 = 9</span>' in page
    assert "line_6 = 6" in page and "line_5 = 5" not in page
    assert html.escape(f"# {XSS}") in page and "<script>alert" not in page
    for missing in ({"file": str(tmp_path / "gone.py"), "line": 2}, {"file": str(tmp_path), "line": 1},
                    {"file": str(script), "line": 500}, None):
        page = render_html({"findings": [{**base, "source": missing}]})
        assert '<pre class="src">' not in page
        assert len(FINDING_RE.findall(page)) == 1


# -- odd values, empty and run-only pages ---------------------------------------------------
def test_non_finite_and_missing_values_render():
    report, run = _hostile()
    report["modules"] = [
        {"module": "a", "type": "Linear", "grad_norm": "nan", "gain": "inf"},
        {"module": "b", "type": "Linear", "grad_norm": "inf", "gain": "nan"},
        {"module": "c", "type": "Linear", "grad_norm": 0.0, "gain": 0.0},
        {"module": "d", "type": "Linear", "grad_norm": None, "gain": None},
        {"module": "", "type": "Net", "grad_norm": 1e-30, "gain": 1e30},
    ]
    report["recurrences"][0]["time_profile"] = None
    report["activations"][0]["histogram"] = None
    report["series"] = [{"step": 0, "loss": "nan", "grad_norm": "inf"}, {"step": 1, "loss": 2.0, "grad_norm": 1.0}]
    page = render_html(report)
    assert "grad norm nan" in page and "grad norm inf" in page and "no gradient measured" in page
    assert "&lt;root&gt;" in page
    assert "no per-time-step profile" in page and "no histogram recorded" in page
    assert 'class="nonfinite"' in page
    page = render_html(report, run)
    assert 'class="nonfinite"' in page


def test_empty_report_and_run_only_page(watched):
    page = render_html({})
    assert "No findings" in page and "<svg" not in page
    _, payload = watched
    page = render_html({}, payload)                 # `leaky report RUN`: the stored findings
    assert len(FINDING_RE.findall(page)) == len(payload["findings"])
    assert _charts(page, "heatmap") == 1 and _charts(page, "loss") == 1


def test_write_html_is_utf8(tmp_path):
    path = tmp_path / "r.html"
    write_html(path, render_html({"findings": [], "run": {"script": "тренировка.py"}}))
    assert "тренировка.py" in path.read_bytes().decode("utf-8")


# -- size ------------------------------------------------------------------------------------
def _synthetic(layers: int = 100, ops: int = 500, acts: int = 100, steps: int = 2000) -> tuple[dict, dict]:
    rng = np.random.default_rng(0)
    path = [f"encoder.layers.{i}.block.linear" for i in range(layers)]
    modules = [{"module": name, "type": "Linear", "order": layers - i, "grad_norm": float(10 ** rng.uniform(-8, 2)),
                "gain": float(10 ** rng.uniform(-2, 2)), "zeroed_share": 0.1, "dead_share": 0.2,
                "saturated_share": 0.3, "ops": 5} for i, name in enumerate(path)]
    src = {"file": "/nonexistent/train.py", "line": 10}
    op_rows = [{"site": i, "op": "linear", "node": "AddmmBackward0", "module": path[i % layers], "source": src,
                "order": i, "steps": 20, "occurrences_per_step": 1.0, "grad_in": 0.5, "grad_out": 0.25,
                "grad_param": 0.1, "gain": 0.5, "zeroed_share": None} for i in range(ops)]
    edges = [-16 + 0.5 * i for i in range(33)]
    activations = [{"site": i, "op": "sigmoid" if i % 2 else "relu", "family": "sigmoid" if i % 2 else "relu",
                    "module": path[i % layers], "source": src, "units": 512, "samples_per_unit": 4096,
                    "dead_share": None if i % 2 else 0.1, "flat_share": 0.2 if i % 2 else None,
                    "median_local_derivative_share": 0.5 if i % 2 else None, "peaked_share": None,
                    "histogram": ({"kind": "log10_derivative_share", "edges": edges,
                                   "counts": [float(c) for c in rng.integers(0, 1000, 32)], "flat_below": -2.0}
                                  if i % 2 else
                                  {"kind": "fire_rate", "edges": [i / 20 for i in range(21)],
                                   "counts": [int(c) for c in rng.integers(0, 50, 20)], "never": 7})}
                   for i in range(acts)]
    findings = [{"name": "vanishing-gradient", "code": "LK103", "severity": "warning", "module": path[i],
                 "op": "linear", "source": src, "step": i, "message": "the gradient … " * 10, "fix": "do this",
                 "evidence": {"profile": list(rng.uniform(0, 1, 65)), "ratio": 0.1}} for i in range(20)]
    report = {"schema": "leaky/report-v1", "run": {"steps": steps}, "findings": findings, "modules": modules,
              "ops": op_rows, "parameters": [{"name": f"{p}.weight", "module": p, "shape": [512, 512],
                                              "grad_norm": 1.0} for p in path],
              "recurrences": [{"module": "rnn", "param": "weight_hh_l0", "kind": "lstm", "spectral_radius": 1.1,
                               "time_steps": 500, "time_profile": list(rng.uniform(0.1, 10, 65))}],
              "activations": activations,
              "series": [{"step": s, "loss": float(rng.uniform(1, 2)), "grad_norm": 1.0, "lr": 0.1}
                         for s in range(steps)]}
    sampled = range(0, steps, 5)                                           # 400 sampled steps
    run = {"run": {"id": 1, "script": "train.py", "argv": [], "status": "finished", "steps": steps},
           "steps": [{"step": s, "loss": float(rng.uniform(1, 2)), "grad_norm": 1.0, "nonfinite": False}
                     for s in range(steps)],
           "module_stats": [{"step": s, "module": p, "grad_norm": float(10 ** rng.uniform(-8, 2)), "gain": 1.0,
                             "dead_share": 0.1, "saturated_share": None, "update_ratio": 1e-3}
                            for s in sampled for p in path],
           "findings": [{**f, "first_step": 5 * i, "last_step": steps} for i, f in enumerate(findings)]}
    return report, run


def test_a_100_layer_report_is_under_5_mb():
    report, run = _synthetic()
    started = time.perf_counter()
    page = render_html(report)
    size = len(page.encode("utf-8"))
    assert size < 5_000_000, size
    assert page.count('<g class="row ') == 100
    assert _charts(page, "hist") == 100
    assert len(FINDING_RE.findall(page)) == 20
    with_run = render_html(report, run)
    assert len(with_run.encode("utf-8")) < 5_000_000, len(with_run.encode("utf-8"))
    assert "Showing 200 of 400 sampled steps" in with_run
    assert time.perf_counter() - started < 20


# -- in a browser -----------------------------------------------------------------------------
RECTS_JS = """<script>(function(){var out=[];document.querySelectorAll('svg.chart').forEach(function(s){
var r=s.getBoundingClientRect();out.push([s.getAttribute('class'),r.left,r.top,r.width,r.height]);});
var p=document.createElement('pre');p.id='chart-rects';p.textContent=JSON.stringify(out);
document.body.appendChild(p);})();</script>"""
CHARTS_FIRST = "<style>#findings,#tables{display:none}</style>"


@pytest.fixture(scope="module")
def browser() -> str:
    return find_chromium()


def _dump(browser, page_path, tmp_path) -> tuple[str, str]:
    done = run_chromium(browser, page_path.as_uri(), f"--user-data-dir={tmp_path / 'profile'}",
                        "--window-size=1280,2400", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def _screenshot(browser, page_path, tmp_path) -> np.ndarray:
    png = tmp_path / (page_path.stem + ".png")
    done = run_chromium(browser, page_path.as_uri(), f"--user-data-dir={tmp_path / 'profile'}",
                        f"--screenshot={png}", "--window-size=1280,2400")
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]
    image = decode_png(png.read_bytes())[:, :, :3]
    assert image.shape[:2] == (2400, 1280)
    return image


def _not_blank(region: np.ndarray, what: str) -> None:
    pixels = region.reshape(-1, 3).astype(np.uint32)
    packed = (pixels[:, 0] << 16) | (pixels[:, 1] << 8) | pixels[:, 2]
    colours, counts = np.unique(packed, return_counts=True)
    assert len(colours) >= 4, f"{what}: {len(colours)} colours"
    assert counts.max() / len(packed) < 0.985, f"{what}: almost one flat colour"


def _chart_regions(browser, html_text: str, tmp_path, name: str) -> tuple[np.ndarray, list]:
    """Screenshot of the page with the findings hidden (charts first) and each chart's box."""
    page = tmp_path / f"{name}.html"
    page.write_text(html_text.replace("<main>", "<main>" + CHARTS_FIRST, 1)
                    .replace("</body>", RECTS_JS + "</body>"), encoding="utf-8")
    dom, _ = _dump(browser, page, tmp_path)
    rects = json.loads(html.unescape(re.search(r'<pre id="chart-rects">(.*?)</pre>', dom).group(1)))
    return _screenshot(browser, page, tmp_path), rects


def _pixels_of(region: np.ndarray, hex_colour: str) -> int:
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.uint8)
    return int(np.all(region == rgb, axis=-1).sum())


def test_browser_no_js_errors_and_findings_in_dom(browser, reports, watched, tmp_path):
    pages = {"sigmoid": (render_html(reports["sigmoid-big-init"]), len(reports["sigmoid-big-init"]["findings"])),
             "watched": (render_html(*watched), len(watched[0]["findings"]))}
    for name, (text, expected) in pages.items():
        path = tmp_path / f"{name}.html"
        write_html(path, text)
        dom, stderr = _dump(browser, path, tmp_path)
        assert console_errors(stderr) == [], name
        assert "<body" in dom and '<svg class="chart flow"' in dom
        assert len(re.findall(r'<section class="finding ', dom)) == expected, name
    # the detector itself: an error in a page's script does show up
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><p>x</p><script>undefinedFunction();</script>", encoding="utf-8")
    _, stderr = _dump(browser, broken, tmp_path)
    assert any("Uncaught" in line for line in console_errors(stderr))


def test_browser_screenshot_shows_the_charts(browser, reports, watched, tmp_path):
    # the page as it opens: findings on top, not a blank or one-colour picture
    path = tmp_path / "full.html"
    write_html(path, render_html(reports["sigmoid-big-init"]))
    _not_blank(_screenshot(browser, path, tmp_path), "the page")

    checked = set()
    cases = [("sigmoid", render_html(reports["sigmoid-big-init"])), ("rnn", render_html(reports["rnn-exploding"])),
             ("watched", render_html(*watched))]
    for name, text in cases:
        image, rects = _chart_regions(browser, text, tmp_path, name)
        for cls, left, top, width, height in rects:
            kind = cls.split()[-1]
            assert width > 50 and height > 50, (name, kind, width, height)
            if top + height > image.shape[0]:
                continue                                   # below the window
            region = image[int(top):int(top + height), int(left):int(left + width)]
            _not_blank(region, f"{name} {kind}")
            checked.add(kind)
            if name == "sigmoid" and kind == "flow":         # act1's collapse is drawn in its colour
                assert _pixels_of(region, "#d62728") > 200
            if name == "sigmoid" and kind == "hist":         # the flat region is shaded
                assert _pixels_of(region, "#fde2e1") > 500
            if name == "rnn" and kind == "flow":             # the recurrent layer's explosion
                assert _pixels_of(region, "#8e44ad") > 100
    assert {"flow", "hist", "recurrence", "loss", "heatmap"} <= checked, checked


def test_the_cli_writes_html_for_audits_watches_and_stored_runs(tmp_path, capsys):
    from leaky.cli import main

    script = tmp_path / "train.py"
    script.write_text("from leaky.zoo import get\nget('relu-high-lr').run(steps=20)\n")
    audit_page, watch_page, run_page = tmp_path / "a.html", tmp_path / "w.html", tmp_path / "r.html"
    assert main(["audit", "--html", str(audit_page), str(script)]) == 1
    store = tmp_path / "runs.db"
    assert main(["watch", "--every", "5", "--store", str(store), "--html", str(watch_page), str(script)]) == 1
    assert main(["report", "latest", "--store", str(store), "--html", str(run_page)]) == 0
    for page in (audit_page, watch_page, run_page):
        text = page.read_text(encoding="utf-8")
        assert text.startswith("<!DOCTYPE html>") and "LK102" in text
    assert "heatmap" in watch_page.read_text(encoding="utf-8").lower()
    assert main(["report", "--store", str(store), "--html", str(tmp_path / "missing" / "x.html")]) == 2
    assert "cannot write the HTML report" in capsys.readouterr().err
