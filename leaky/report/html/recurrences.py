"""The Recurrences section: per recurrent weight, its spectral radius and the gradient norm
reaching each time step (log scale). Rising toward t = 0: exploding through time; falling:
vanishing. A backend that runs the whole recurrence as one autograd node gives no profile.
"""
from __future__ import annotations

from leaky.report.format import module_label
from leaky.report.html.linechart import line_chart
from leaky.report.html.svg import COLOR
from leaky.report.html.values import as_float, esc, positive, value_text

DOTS_UP_TO = 65             # a profile of at most this many time steps is drawn with dots


def recurrences_html(recs: list[dict]) -> str:
    if not recs:
        return ""
    return (f'<section id="recurrences"><h2>Recurrences</h2><p class="lede">Gradient norm reaching each '
            f'time step, log scale. Rising toward t = 0: exploding through time; falling: vanishing.</p>'
            f'{"".join(recurrence_card(r) for r in recs)}</section>')


def recurrence_card(r: dict) -> str:
    module = module_label(r.get("module"))
    head = " · ".join(esc(x) for x in (module, r.get("param") or "", r.get("kind") or ""))
    if r.get("gated"):
        head += " (gated)"
    facts = (f'spectral radius ρ = {esc(value_text(r.get("spectral_radius")))} · '
             f'{esc(value_text(r.get("time_steps")))} time steps')
    return (f'<div class="card rec"><div class="card-head">{head}</div><div class="facts">{facts}</div>'
            f'{_profile_chart(r, module)}</div>')


def _profile_chart(r: dict, module: str) -> str:
    profile = r.get("time_profile")
    if not (isinstance(profile, list) and profile):
        return ('<p class="none">no per-time-step profile: the backend runs the whole recurrence as one '
                'node (e.g. oneDNN LSTM on CPU, cuDNN on GPU)</p>')
    steps = as_float(r.get("time_steps"))
    n = len(profile)
    span = (steps - 1) if steps and steps > 1 else (n - 1)      # the profile's points spread over the steps
    pts = [((i * span / (n - 1)) if n > 1 else 0.0, positive(v)) for i, v in enumerate(profile)]
    return line_chart("recurrence", f"gradient norm per time step of {module}",
                      [(f"{module} {r.get('param') or ''}", pts, COLOR["explosion"])], log_y=True,
                      x_label="time step (t = 0 is the first input)", y_label="gradient norm",
                      height=240, dots=n <= DOTS_UP_TO)
