"""The Gradient flow section: the gradient norm arriving at each module, from the loss
(top) to the input (bottom), on a log scale, with the gain through each module beside it.

The gain is the norm leaving toward the input over the norm arriving. The colours follow
the findings, not a threshold of their own: a module is drawn red where a warning or an
error judged that the gradient is lost there (LOST: vanishing, saturated, dead units, dead
zone, no path; a recurrence that shrinks it), purple where one judged that it grows there
(GROWN: exploding; a recurrence that grows it), and so is the line leaving its bar end. Every
other module is neutral and its gain a plain number, however small: a mean over the batch
or a sigmoid's 1/4 is not a leak unless a check says so.
"""
from __future__ import annotations

import math

from leaky.report.format import ellipsize, module_label
from leaky.report.html.svg import COLOR, Scale, coord, decade_range, flow_axis, svg_open, svg_text, swatch
from leaky.report.html.values import esc, positive, share_text, value_text

# What a finding says about the gradient at the modules it names, by code: it is lost there
# (drawn as "collapse") or it grows there ("explosion"); the value names the evidence key
# that lists the other modules it blames (records with a "module"). LK105 says which way
# in its evidence `direction`. Info findings colour nothing.
LOST = {"LK101": None, "LK102": None, "LK103": "lossy_ops", "LK106": None, "LK108": None}
GROWN = {"LK104": "amplifying_ops"}
RECURRENT = "LK105"
PROBLEMS = ("error", "warning")
MARK = {"collapse": "▼", "explosion": "▲"}
MARK_CODES = 2              # codes written beside a gain; more are in the hover text
LABEL_W, BAR_W, GAIN_W, ROW_H, TOP = 250, 560, 190, 20, 44
LABEL_CHARS = 32            # about what fits in LABEL_W at the label's font size


def flow_html(modules: list[dict], findings: list[dict] | None = None) -> str:
    if not modules:
        return ""
    legend = (f'<p class="legend">{swatch(COLOR["collapse"])}{MARK["collapse"]} a finding judged that the '
              f'gradient is lost here {swatch(COLOR["explosion"])}{MARK["explosion"]} a finding judged that '
              f'it grows here {swatch(COLOR["ok"])}no finding judged it: the gain is only a number</p>')
    return (f'<section id="flow"><h2>Gradient flow</h2><p class="lede">Gradient norm arriving at each '
            f'module, from the loss (top) to the input (bottom), log scale; the gain is the norm leaving '
            f'toward the input over the norm arriving. A module is coloured only where a warning or an '
            f'error names it, with that finding\'s code. Hover a row for its numbers.</p>{legend}'
            f'<figure class="wide">{flow_chart(modules, findings or [])}</figure></section>')


def judged(findings: list[dict]) -> dict[str, list[tuple[str, dict]]]:
    """module -> [(collapse | explosion, finding)]: each warning or error that judged the
    gradient lost or grown at that module (the finding's module and the ones its evidence blames)."""
    out: dict[str, list[tuple[str, dict]]] = {}
    for f in findings:
        if not isinstance(f, dict) or str(f.get("severity")) not in PROBLEMS:
            continue
        code, evidence = f.get("code"), f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
        if code in LOST:
            kind, key = "collapse", LOST[code]
        elif code in GROWN:
            kind, key = "explosion", GROWN[code]
        elif code == RECURRENT:
            kind, key = ("explosion" if evidence.get("direction") == "grows" else "collapse"), None
        else:
            continue
        names = [f.get("module")]
        if key and isinstance(evidence.get(key), list):
            names.extend(r.get("module") for r in evidence[key] if isinstance(r, dict))
        for name in dict.fromkeys(n for n in names if isinstance(n, str)):
            out.setdefault(name, []).append((kind, f))
    return out


def row_class(verdicts: list[tuple[str, dict]]) -> str:
    """collapse or explosion, as the most severe finding at the module says; ok without one."""
    if not verdicts:
        return "ok"
    return max(verdicts, key=lambda v: PROBLEMS[::-1].index(str(v[1].get("severity"))))[0]


def flow_chart(modules: list[dict], findings: list[dict] | None = None) -> str:
    logs = [math.log10(g) for g in (positive(m.get("grad_norm")) for m in modules) if g is not None]
    width, height = LABEL_W + BAR_W + GAIN_W, TOP + len(modules) * ROW_H + 12
    lo, hi = decade_range(logs) if logs else (-1, 1)
    x = Scale(lo, hi, LABEL_W, LABEL_W + BAR_W)
    out = [svg_open("flow", width, height, "gradient norm per module, loss to input, log scale")]
    out.extend(_axis(x, lo, hi, height))
    verdicts = judged(findings or [])
    classes = [row_class(verdicts.get(m.get("module"), [])) for m in modules]
    out.extend(_path(modules, classes, x))
    for i, m in enumerate(modules):
        out.extend(_row(m, classes[i], verdicts.get(m.get("module"), []), TOP + i * ROW_H, x, width))
    out.append("</svg>")
    return "".join(out)


def _axis(x: Scale, lo: int, hi: int, height: int) -> list[str]:
    """Decade grid lines and labels, and the three column headings."""
    return flow_axis(x, lo, hi, height, TOP, LABEL_W, BAR_W, "gain through it")


def _path(modules: list[dict], classes: list[str], x: Scale) -> list[str]:
    """The path of the signal through the bar ends, under the bars; the segment leaving a
    judged module in its colour."""
    ends = [None if positive(m.get("grad_norm")) is None
            else (x(math.log10(positive(m.get("grad_norm")))), TOP + i * ROW_H + ROW_H / 2)
            for i, m in enumerate(modules)]
    out = []
    for i in range(len(ends) - 1):
        a, b = ends[i], ends[i + 1]
        if a is None or b is None:
            continue
        cls = classes[i]
        color = COLOR[cls] if cls in MARK else "#1f3b5c"
        wid = 2.5 if cls in MARK else 1
        out.append(f'<line x1="{coord(a[0])}" y1="{coord(a[1])}" x2="{coord(b[0])}" y2="{coord(b[1])}" '
                   f'stroke="{color}" stroke-width="{wid}"/>')
    return out


def _row(m: dict, cls: str, verdicts: list[tuple[str, dict]], y: float, x: Scale, width: int) -> list[str]:
    """One module: its label, its bar (or why there is none) and its gain, with hover text;
    coloured, and the gain marked with the findings' codes, where a finding judged it."""
    name = module_label(m.get("module"))
    kind = m.get("type") or ""
    tip = (f"{name}{f' ({kind})' if kind else ''}: gradient norm in {value_text(m.get('grad_norm'))}, "
           f"gain {value_text(m.get('gain'))}, zeroed {share_text(m.get('zeroed_share'))}, "
           f"dead {share_text(m.get('dead_share'))}, saturated {share_text(m.get('saturated_share'))}")
    codes = list(dict.fromkeys(str(f.get("code") or "") for _, f in verdicts))
    if verdicts:
        tip += "; judged by " + ", ".join(f"{f.get('code')} {f.get('name') or ''} ({f.get('severity')})"
                                          for _, f in verdicts)
    data = f' data-codes="{esc(" ".join(codes))}"' if codes else ""
    out = [f'<g class="row {cls}"{data}><title>{esc(tip)}</title>']
    if cls in MARK:
        out.append(f'<rect x="0" y="{y}" width="{width}" height="{ROW_H}" fill="{COLOR[cls]}" '
                   f'fill-opacity="0.08"/>')
    label = esc(ellipsize(name, LABEL_CHARS))
    if kind and kind != name and len(name) + len(kind) < LABEL_CHARS:
        label += f' <tspan class="type">{esc(kind)}</tspan>'
    out.append(f'<text x="{LABEL_W - 8}" y="{coord(y + ROW_H * 0.7)}" class="label" text-anchor="end">'
               f'{label}</text>')
    out.append(_bar(m, y, x, cls))
    gain = m.get("gain")
    mark = ""
    if cls in MARK:
        shown = " ".join(codes[:MARK_CODES]) + (" …" if len(codes) > MARK_CODES else "")
        mark = f" {MARK[cls]} {shown}"
    if gain is not None or mark:
        text = (f"×{value_text(gain)}" if gain is not None else "") + mark
        fill = COLOR[cls] if cls in MARK else COLOR["axis"]
        out.append(svg_text(LABEL_W + BAR_W + 14, y + ROW_H * 0.7, text.strip(), f"gain {cls}",
                            extra=f' fill="{fill}"'))
    out.append("</g>")
    return out


def _bar(m: dict, y: float, x: Scale, cls: str) -> str:
    g = positive(m.get("grad_norm"))
    if g is not None:
        end = x(math.log10(g))
        return (f'<rect x="{LABEL_W}" y="{y + 3}" width="{coord(max(1.0, end - LABEL_W))}" '
                f'height="{ROW_H - 6}" rx="2" fill="{COLOR[cls] if cls in MARK else COLOR["ok"]}"/>')
    raw = m.get("grad_norm")
    what = "no gradient measured" if raw is None else f"grad norm {value_text(raw)}"
    return svg_text(LABEL_W + 4, y + ROW_H * 0.7, what, "missing")
