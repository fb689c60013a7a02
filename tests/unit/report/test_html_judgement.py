"""The HTML report says what the checks say, in the model's order.

- The gradient-flow chart colours a module only where a warning or an error judged the
  gradient lost or grown there; a healthy model's small gains (the loss's mean over a big
  batch) are plain numbers.
- The heatmap of a stored run and the per-layer legends list modules in model order, also
  for `leaky report RUN` (no report, only the store); by name, numbers as numbers, only as
  a fallback.
- The findings are in the order the page says they are.
"""
from __future__ import annotations

import html
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.demo import audit_example
from leaky.report.html import render_html, run_payload
from leaky.report.html.svg import COLOR
from leaky.report.html.values import value_text
from leaky.store import Store
from leaky.zoo import get
from leaky.zoo._base import batches, data_generator, teacher_classification

ROW_RE = re.compile(r'<g class="row (\w+)"(?: data-codes="([^"]*)")?><title>([^<]*)</title>')
CARD_RE = re.compile(r'<section class="finding sev-\w+" id="finding-(\d+)" data-code="([^"]*)" '
                     r'data-severity="(\w+)"(?: data-explained-by="(\d+)")?>')
LEDE_RE = re.compile(r'<section id="findings"><h2>.*?</h2><p class="lede">(.*?)</p>', re.S)
PROBLEM = ("collapse", "explosion")
RANK = {"error": 2, "warning": 1, "info": 0}
LAYERS = 7                   # Linear layers of the healthy MLP: 13 modules named 0..12


def _healthy_mlp(steps: int, batch: int = 256) -> list[float]:
    """A Kaiming-initialised ReLU MLP on standardised inputs, Adam 1e-3; a batch of 256 makes
    the cross-entropy's mean pass on ~1/16 of the gradient to the logits."""
    torch.manual_seed(0)
    dims = [20] + [64] * (LAYERS - 1) + [10]
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        linear = nn.Linear(a, b)
        nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")
        nn.init.zeros_(linear.bias)
        layers += [linear] + ([nn.ReLU()] if i < LAYERS - 1 else [])
    model = nn.Sequential(*layers)
    x_all, y_all = teacher_classification(2048, 20, 10, data_generator(0))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        rows = batches(2048, batch, step)
        opt.zero_grad()
        loss = F.cross_entropy(model(x_all[rows]), y_all[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.fixture(scope="module")
def healthy() -> dict:
    with leaky.audit(steps=12) as observed:
        _healthy_mlp(12)
    return observed.report.to_dict()


@pytest.fixture(scope="module")
def watched(tmp_path_factory) -> tuple[dict, dict]:
    path = tmp_path_factory.mktemp("watch") / "runs.db"
    with leaky.watch(every=4, store=path) as w:
        _healthy_mlp(12)
    with Store(path) as store:
        payload = run_payload(store, w.run_id)
    return w.report.to_dict(), payload


def _audit(name: str) -> dict:
    torch.manual_seed(0)
    return audit_example(get(name), 10).to_dict()


def _rows(page: str) -> list[tuple[str, list[str], str]]:
    """(class, codes, module label) of each gradient-flow row."""
    return [(cls, codes.split(), html.unescape(title).split(" (")[0].split(":")[0])
            for cls, codes, title in ROW_RE.findall(page)]


def _flow(page: str) -> str:
    chart = page[page.index('<svg class="chart flow"'):]
    return chart[:chart.index("</svg>")]


# -- the gradient-flow colours follow the findings ---------------------------------------------
def test_a_healthy_model_has_no_problem_coloured_bar(healthy):
    assert [f for f in healthy["findings"] if f["severity"] != "info"] == []
    small = [m for m in healthy["modules"] if isinstance(m.get("gain"), float) and m["gain"] < 0.1]
    assert small, "the loss's mean over 256 samples should pass on < 0.1 (what the old threshold coloured)"
    page = render_html(healthy)
    rows = _rows(page)
    assert len(rows) == len(healthy["modules"])
    assert [r for r in rows if r[0] in PROBLEM] == []
    flow = _flow(page)
    assert COLOR["collapse"] not in flow and COLOR["explosion"] not in flow
    assert "▼" not in flow and "▲" not in flow and "collapse" not in flow
    for m in small:                                            # the gain is there, as a plain number
        assert re.search(r'class="gain ok"[^>]*>×' + re.escape(html.escape(value_text(m["gain"]))), flow)


def _judged_modules(report: dict, code: str, key: str) -> set[str]:
    out = set()
    for f in report["findings"]:
        if f["code"] == code and f["severity"] in ("error", "warning"):
            out.add(f["module"])
            out.update(r["module"] for r in f["evidence"].get(key) or [])
    return out


@pytest.mark.parametrize("name, code, key, cls", [
    ("sigmoid-big-init", "LK103", "lossy_ops", "collapse"),
    ("deep-vanishing", "LK103", "lossy_ops", "collapse"),
    ("deep-exploding", "LK104", "amplifying_ops", "explosion"),
])
def test_a_broken_model_is_coloured_at_the_judged_site(name, code, key, cls):
    report = _audit(name)
    sites = _judged_modules(report, code, key)
    assert sites, f"{name} should have {code}"
    rows = {label: (c, codes) for c, codes, label in _rows(render_html(report))}
    for site in sites:
        assert rows[site][0] == cls and code in rows[site][1], (site, rows[site])
    # every coloured row rests on a warning or an error at that module
    blamed = {f["module"] for f in report["findings"] if f["severity"] in ("error", "warning")} | sites
    for label, (c, codes) in rows.items():
        if c in PROBLEM:
            assert codes and label in blamed, label
    # and the gain of a module no finding names is not marked, however small
    unjudged = [m for m in report["modules"] if m["module"] not in blamed and m.get("module") in rows]
    assert all(rows[m["module"]][0] == "ok" for m in unjudged)


def test_a_deep_sigmoid_colours_only_what_its_findings_name():
    report = _audit("sigmoid-big-init")
    rows = {label: (c, codes) for c, codes, label in _rows(render_html(report))}
    assert rows["act1"] == ("collapse", ["LK101", "LK103"])         # saturated, and the most lost there
    assert rows["<script>"][0] == "ok"                              # the loss's mean (gain 0.12) is no leak
    assert {k for k, (c, _) in rows.items() if c in PROBLEM} == {"act1", "act2", "act3"}


def test_an_info_finding_colours_nothing():
    report = _audit("deep-vanishing")
    for f in report["findings"]:
        f["severity"] = "info"
    assert [r for r in _rows(render_html(report)) if r[0] in PROBLEM] == []


# -- the stored run's rows in model order ---------------------------------------------------
def _heatmap_rows(page: str) -> list[str]:
    chart = page[page.index('<svg class="chart heatmap"'):]
    chart = chart[:chart.index("</svg>")]
    return [html.unescape(t) for t in re.findall(r'<g class="hrow">(?:<title>[^<]*</title>)?<text[^>]*>([^<]*)</text>',
                                                 chart)]


def _legend_after(page: str, heading: str) -> list[str]:
    part = page[page.index(heading):]
    legend = part[part.index('<div class="legend">'):]
    legend = legend[:legend.index("</div>")]
    return [html.unescape(n) for n in re.findall(r'</span>([^<]*)</span>', legend)]


def _numbered(names: list[str]) -> list[int]:
    return [int(n) for n in names if n.isdigit()]


def test_stored_run_heatmap_and_legends_in_model_order(watched):
    report, payload = watched
    modules = {s["module"] for s in payload["module_stats"]}
    assert len(modules) >= 12, modules
    loss_to_input = list(range(2 * LAYERS - 2, -1, -1))               # 12, 11, ..., 1, 0
    for page in (render_html({}, payload), render_html(report, payload)):   # `leaky report RUN`, `watch --html`
        rows = _heatmap_rows(page)
        assert len(rows) == len(modules)
        assert _numbered(rows) == loss_to_input, rows
        assert rows == [m["module"] for m in report["modules"] if m["module"] in modules]
        assert "rows from the loss to the input" in page
        assert _numbered(_legend_after(page, "Update ratio over time")) == \
            [i for i in loss_to_input if i % 2 == 0]                 # the Linear layers, with parameters


def test_without_a_recorded_order_rows_go_by_name_numbers_as_numbers(watched):
    _, payload = watched
    page = render_html({}, {**payload, "module_order": []})
    rows = _heatmap_rows(page)
    assert _numbered(rows) == list(range(2 * LAYERS - 1)), rows      # 0, 1, 2, ..., 10, 11, 12
    assert "rows by module name" in page and "rows from the loss to the input" not in page


# -- the findings are in the order the page says ------------------------------------------------
def _cards(page: str) -> list[tuple[int, str, str, int | None]]:
    return [(int(i), code, sev, int(by) if by else None) for i, code, sev, by in CARD_RE.findall(page)]


def assert_order_is_as_said(page: str) -> None:
    """Groups (a card and the cards placed under it) go most severe first; within a group the
    cause leads and each card sits below the one that explains it. If the page claims no
    exception, the cards are plainly most severe first."""
    cards = _cards(page)
    lede = html.unescape(LEDE_RE.search(page).group(1))
    assert lede.startswith("Most severe first: errors, then warnings, then info")
    groups: list[list[tuple]] = []
    for card in cards:
        i, _, _, by = card
        if by is None:
            groups.append([card])
        else:
            assert by < i and by in [c[0] for c in groups[-1]], "placed under a cause that is not just above"
            groups[-1].append(card)
    if "root cause" not in lede:
        assert all(len(g) == 1 for g in groups)
    worst = [max(RANK[c[2]] for c in g) for g in groups]
    assert worst == sorted(worst, reverse=True), [[(c[1], c[2]) for c in g] for g in groups]
    for g in groups:
        if len(g) > 1:
            assert "root cause" in lede
            assert f'Root cause of <a href="#finding-{g[1][0]}">' in page


@pytest.mark.parametrize("name", ["sigmoid-big-init", "deep-exploding", "relu-high-lr"])
def test_real_reports_are_in_the_order_the_page_says(name):
    report = _audit(name)
    page = render_html(report)
    assert_order_is_as_said(page)
    assert len(_cards(page)) == len(report["findings"])


def test_sigmoid_big_init_puts_the_weight_scale_before_the_saturation_it_explains():
    report = _audit("sigmoid-big-init")
    page = render_html(report)
    cards = _cards(page)
    scale = next(c for c in cards if c[1] == "LK302")
    saturated = next(c for c in cards if c[1] == "LK101")
    assert saturated[3] == scale[0] == saturated[0] - 1
    assert "root cause comes first in its group" in html.unescape(LEDE_RE.search(page).group(1))


def _finding(code: str, severity: str, module: str | None, step: int, **evidence) -> dict:
    return {"name": code.lower(), "code": code, "severity": severity, "module": module, "op": None,
            "source": None, "step": step, "message": f"{code} message", "fix": f"{code} fix",
            "evidence": evidence, "first_step": step, "last_step": step}


def test_stored_findings_in_step_order_are_shown_most_severe_first():
    """`leaky report RUN` gets the store's findings by first step; the page ranks them, a
    warning that explains an error leads that error's group, and the words say so."""
    stored = [_finding("LK202", "info", "fc1", 0),
              _finding("LK103", "warning", "act1", 5),
              _finding("LK202", "warning", "fc2", 5),
              _finding("LK204", "error", None, 20, explained_by=["LK103"]),
              _finding("LK102", "error", "act2", 30)]
    page = render_html({}, {"run": {"id": 1, "status": "finished"}, "steps": [], "module_stats": [],
                            "findings": stored})
    assert [(c[1], c[2]) for c in _cards(page)] == [("LK103", "warning"), ("LK204", "error"),
                                                    ("LK102", "error"), ("LK202", "warning"), ("LK202", "info")]
    assert _cards(page)[1][3] == 1
    assert "Explained by" in page
    assert_order_is_as_said(page)
    # without the link, the warning is no longer put first
    del stored[3]["evidence"]["explained_by"]
    page = render_html({"findings": stored})
    assert [c[2] for c in _cards(page)] == ["error", "error", "warning", "warning", "info"]
    assert "root cause" not in html.unescape(LEDE_RE.search(page).group(1))
    assert_order_is_as_said(page)


def test_a_cycle_of_causes_still_lists_every_finding_once():
    a = _finding("LK101", "error", "a", 0, explained_by=["LK102"])
    b = _finding("LK102", "warning", "b", 0, explained_by=["LK101"])
    page = render_html({"findings": [b, a]})
    assert sorted(c[1] for c in _cards(page)) == ["LK101", "LK102"]
    assert_order_is_as_said(page)
