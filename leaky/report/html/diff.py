"""The page of a comparison, `leaky diff A B`: one self-contained page from the
`leaky/diff-v1` dict, drawn with the report page's pieces.

    from leaky.report.html import render_diff_html, write_html
    write_html("diff.html", render_diff_html(diff))

Top to bottom: the verdict and the noise it was judged against; the first parted site (both
sides' module, op and line, the differences, the line to change, the findings that explain
it); the gradient flow of A and B overlaid (overlay.py); the loss curves overlaid, marked
where B parts from A; the configuration differences; every aligned site; the findings only
one run has. Every key is optional: a section with nothing to show is left out. Strings
from the user's program are escaped; the dict rides along as JSON, as on the report page.
"""
from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from leaky.report.format import module_label
from leaky.report.html.findings import change_line, finding_section
from leaky.report.html.overlay import flow_overlay, loss_overlay, run_legend
from leaky.report.html.page import css, script_json, toc
from leaky.report.html.snippets import Sources
from leaky.report.html.values import esc, source_text, value_text

STATUS = {"parted": "parted", "changed_op": "changed op", "only_a": "only in A", "only_b": "only in B",
          "same": "same"}
NOISE = {"reruns": "from {reruns} reruns of A", "steps": "from each run's own steps"}
SIDES = ("a", "b")


@functools.cache
def diff_css() -> str:
    """The comparison's few extra styles (leaky/report/html/diff.css), after page.css."""
    return resources.files(__package__).joinpath("diff.css").read_text(encoding="utf-8")


def render_diff_html(data: dict) -> str:
    """The page of one `leaky/diff-v1` dict; keys missing from it leave their section out."""
    data = data or {}
    label_a, label_b = (_run(data, side).get("label") or side.upper() for side in SIDES)
    sources = Sources()
    blocks = [
        ("parted", "Where B parts", parted_html(data.get("first_parted"), sources)),
        ("flow", "Gradient flow", flow_html(_list(data, "flow"), label_a, label_b)),
        ("loss", "Loss", loss_html(_list(data, "loss"), label_a, label_b)),
        ("config", "Configuration", config_html(_list(data, "config"))),
        ("sites", "Sites", sites_html(_list(data, "sites"))),
        ("findings", "Findings", findings_html(data.get("findings"), sources)),
    ]
    present = [(i, t) for i, t, body in blocks if body]
    return "".join([
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="leaky">',
        f"<title>{esc(f'leaky diff: {label_a} against {label_b}')}</title>"
        f"<style>\n{css()}{diff_css()}</style></head><body><main>",
        header(data),
        toc(present),
        "".join(body for _, _, body in blocks),
        f'<footer>Made by leaky from the <code>{esc(data.get("schema") or "leaky/diff-v1")}</code> '
        f'comparison, which this page carries as JSON (script#leaky-data).</footer>',
        f'</main><script type="application/json" id="leaky-data">{script_json(data)}</script>',
        "</body></html>\n",
    ])


def _run(data: dict, side: str) -> dict:
    run = data.get(side)
    return run if isinstance(run, dict) else {}


def _list(data: dict, key: str) -> list[dict]:
    return [row for row in data.get(key) or [] if isinstance(row, dict)]


def header(data: dict) -> str:
    """The title, each run's label and facts, the verdict and the noise it was judged against."""
    runs = "".join(f'<p class="facts run-{side}"><span class="side">{side.upper()}</span> '
                   f'<code>{esc(_run(data, side).get("label") or "?")}</code>{_run_facts(_run(data, side))}</p>'
                   for side in SIDES)
    versions = " · ".join(f"{name} {esc(data[key])}" for name, key in
                          (("leaky", "leaky_version"), ("torch", "torch_version")) if data.get(key))
    versions = f'<p class="facts">{versions}</p>' if versions else ""
    return (f'<header class="page"><h1>leaky diff: A against B</h1>{runs}{verdict_html(data)}'
            f'{noise_html(data.get("noise"))}{versions}</header>')


def _run_facts(run: dict) -> str:
    facts = [str(run["kind"])] if run.get("kind") else []
    if run.get("steps") is not None:
        facts.append(f"{run['steps']} steps")
    if run.get("status"):
        facts.append(f"status {run['status']}")
    return "".join(f" · {esc(f)}" for f in facts)


def verdict_html(data: dict) -> str:
    """One line: where B parts from A, that nothing differs beyond the noise, or why no verdict."""
    verdict = data.get("verdict")
    if verdict == "parted":
        where = site_name(data.get("first_parted")) or _loss_parting(_list(data, "loss"))
        at = f" at <b>{esc(where)}</b>" if where else ""
        return f'<p class="verdict parted">B parts from A{at}</p>'
    if verdict == "same":
        return '<p class="verdict same">no difference beyond the noise</p>'
    if verdict == "unusable":
        return f'<p class="verdict unusable">no comparison: {esc(data.get("reason") or "no reason given")}</p>'
    return f'<p class="verdict unusable">no verdict ({esc(value_text(verdict))})</p>'


def _loss_parting(curves: list[dict]) -> str:
    """Where the loss parts, for a verdict with no parted site: "step 7 of the loss"."""
    for curve in curves:
        if curve.get("parted_at") is not None:
            of = f"optimizer {curve.get('optimizer')}'s loss" if len(curves) > 1 else "the loss"
            return f"step {curve['parted_at']} of {of}"
    return ""


def noise_html(noise: Any) -> str:
    if not isinstance(noise, dict) or not noise:
        return ""
    source = NOISE.get(str(noise.get("source")), "{source}").format(
        reruns=value_text(noise.get("reruns")), source=value_text(noise.get("source")))
    detail = f": {esc(noise['detail'])}" if noise.get("detail") else ""
    return f'<p class="facts noise">noise, {esc(source)}{detail}</p>'


def site_name(site: Any) -> str:
    """A site for a person: B's module · op · file:line (A's where B has none)."""
    if not isinstance(site, dict):
        return ""
    side = site.get("b") if isinstance(site.get("b"), dict) else site.get("a")
    return " · ".join(_side_cells(side)) if isinstance(side, dict) else ""


def _side_cells(side: Any) -> list[str]:
    """module, op and file:line of one side of a site ([] where the run has no such site)."""
    if not isinstance(side, dict):
        return []
    return [module_label(side.get("module")), str(side.get("op") or "?"), source_text(side.get("source"))[0] or "?"]


def parted_html(site: Any, sources: Sources) -> str:
    """The first parted site: both sides, the differences, the line to change, what explains it."""
    if not isinstance(site, dict):
        return ""
    a, b = (_side_cells(site.get(s)) or ["—"] * 3 for s in SIDES)
    rows = "".join(f"<tr><th>{what}</th><td>{esc(a[k])}</td><td>{esc(b[k])}</td></tr>"
                   for k, what in enumerate(("module", "op", "line")))
    snippets = "".join(f"<div>{snippet}</div>" for s in SIDES
                       if isinstance(site.get(s), dict) and (snippet := sources.snippet(site[s].get("source"))))
    snippets = f'<div class="cols">{snippets}</div>' if snippets else ""
    return (f'<section id="parted"><h2>Where B parts from A <span class="status st-{esc(site.get("status"))}">'
            f'{esc(STATUS.get(str(site.get("status")), site.get("status") or ""))}</span></h2>'
            f'<p class="msg">{esc(site.get("meaning") or "")}</p>'
            f'<table class="data sides"><thead><tr><th></th><th>A</th><th>B</th></tr></thead>'
            f'<tbody>{rows}</tbody></table>'
            f'{snippets}'
            f'{differences_table(site.get("differences") or [])}{change_line(site.get("change"))}'
            f'{explained_html(site.get("explained_by") or [])}</section>')


def differences_table(differences: list) -> str:
    rows = "".join(f'<tr><td>{esc(d.get("stat") or "")}</td>'
                   + "".join(f"<td>{esc(value_text(d.get(k)))}</td>" for k in ("a", "b", "noise"))
                   + f'<td class="meaning">{esc(d.get("meaning") or "")}</td></tr>'
                   for d in differences if isinstance(d, dict))
    if not rows:
        return ""
    return ('<h3>Differences</h3><div class="scroll"><table class="data differences"><thead><tr><th>stat</th>'
            f'<th>A</th><th>B</th><th>noise</th><th>meaning</th></tr></thead><tbody>{rows}</tbody></table></div>')


def explained_html(findings: list) -> str:
    """The findings of either run that explain the site, one line each."""
    items = "".join(f'<li>{finding_line(f)}</li>' for f in findings if isinstance(f, dict))
    return f'<h3>Explained by</h3><ul class="explained-by">{items}</ul>' if items else ""


def finding_line(f: dict) -> str:
    """A finding in one line (and its message under it), with the run it is from where it says."""
    severity = str(f.get("severity") or "info")
    where = " · ".join(x for x in (module_label(f.get("module")), str(f.get("op") or ""),
                                   source_text(f.get("source"))[0]) if x)
    run = str(f.get("run") or "").lower()
    side = f'<span class="side run-{run}">{run.upper()}</span>' if run in SIDES else ""
    return (f'{side}<span class="badge {esc(severity)}">{esc(severity.upper())}</span> '
            f'<span class="code">{esc(f.get("code") or "")}</span> {esc(f.get("name") or "")} · {esc(where)}'
            f'<br><span class="msg">{esc(f.get("message") or "")}</span>')


def flow_html(flow: list[dict], label_a: str, label_b: str) -> str:
    if not flow:
        return ""
    return ('<section id="flow"><h2>Gradient flow</h2><p class="lede">Gradient norm arriving at each aligned '
            'site, from the loss (top) to the input (bottom), log scale, A and B overlaid; the tinted rows '
            'part beyond the noise, ◆ the first of them. Hover a row for its numbers.</p>'
            f'{run_legend(label_a, label_b)}<figure class="wide">{flow_overlay(flow, label_a, label_b)}</figure>'
            '</section>')


def loss_html(curves: list[dict], label_a: str, label_b: str) -> str:
    parts = []
    for curve in curves:
        parted = curve.get("parted_at")
        says = (f"B parts from A at step {esc(parted)} (▼)" if parted is not None
                else "B does not part from A beyond the noise")
        noise = f"; noise {esc(value_text(curve['noise']))}" if curve.get("noise") is not None else ""
        meaning = f' {esc(curve["meaning"])}' if curve.get("meaning") else ""
        head = f"<h3>Optimizer {esc(curve.get('optimizer', 0))}</h3>" if len(curves) > 1 else ""
        parts.append(f'{head}<p class="lede">{says}{noise}.{meaning}</p>'
                     f'<figure>{loss_overlay(curve, label_a, label_b)}</figure>')
    if not parts:
        return ""
    return (f'<section id="loss"><h2>Loss</h2><p class="lede">Loss per step, A and B overlaid.</p>'
            f'{run_legend(label_a, label_b)}{"".join(parts)}</section>')


def config_html(config: list[dict]) -> str:
    rows = "".join(f'<tr><td>{esc(c.get("what") or "")}</td>'
                   + "".join(f'<td>{_setting(c.get(s), c.get(f"source_{s}"))}</td>' for s in SIDES) + "</tr>"
                   for c in config)
    if not rows:
        return ""
    return ('<section id="config"><h2>Configuration</h2><p class="lede">What the two runs were set up with, '
            'where it differs, and the line that sets it.</p><div class="scroll"><table class="data config">'
            f'<thead><tr><th>what</th><th>A</th><th>B</th></tr></thead><tbody>{rows}</tbody></table></div>'
            '</section>')


def _setting(value: Any, source: Any) -> str:
    short, full = source_text(source)
    where = f' <span class="file" title="{esc(full)}">{esc(short)}</span>' if short else ""
    return ("<code>" + esc(value) + "</code>" if value is not None else '<span class="none">not set</span>') + where


def sites_html(sites: list[dict]) -> str:
    if not sites:
        return ""
    rows = []
    for i, site in enumerate(sites):
        status = str(site.get("status") or "")
        cells = "".join(f"<td>{esc(' · '.join(_side_cells(site.get(s)))) or '—'}</td>" for s in SIDES)
        rows.append(f'<tr class="st-{esc(status)}"><td>{i + 1}</td><td><span class="status st-{esc(status)}">'
                    f'{esc(STATUS.get(status, status))}</span></td>{cells}'
                    f'<td class="meaning">{esc(site.get("meaning") or "")}</td></tr>')
    return (f'<section id="sites"><h2>Sites <span class="count">{len(sites)}</span></h2><p class="lede">Every '
            'site of A aligned with its site in B, from the loss toward the inputs: module · op · line.</p>'
            '<div class="scroll"><table class="data sites"><thead><tr><th>#</th><th>status</th><th>A</th>'
            f'<th>B</th><th>meaning</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div></section>')


def findings_html(findings: Any, sources: Sources) -> str:
    """The findings only one run has, as the report page's cards, numbered across both lists."""
    if not isinstance(findings, dict):
        return ""
    parts, number = [], 0
    for key, side in (("only_a", "A"), ("only_b", "B")):
        cards = []
        for f in findings.get(key) or []:
            if isinstance(f, dict):
                number += 1
                cards.append(finding_section(number, f, sources, None))
        if cards:
            parts.append(f'<h3>Only in {side} <span class="count">{len(cards)}</span></h3>{"".join(cards)}')
    if not parts:
        return ""
    both = len(findings.get("both") or [])
    both = f"; {both} more {'is' if both == 1 else 'are'} in both runs" if both else ""
    return (f'<section id="findings"><h2>Findings</h2><p class="lede">Findings one run has and the other does '
            f'not{both}.</p>{"".join(parts)}</section>')
