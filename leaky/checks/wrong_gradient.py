"""LK305 wrong-gradient: a custom autograd.Function whose backward disagrees with finite
differences.

A hand-written backward must return the vector-Jacobian product of its forward,
grad_x = J^T v. leaky re-checks each user Function once, at the first call it observes,
in float64 at a slice of the real inputs: for random v and unit directions u,

    <grad_x, u>  vs  (<v, f(x + eps u)> - <v, f(x - eps u)>) / (2 eps)

A disagreement that persists at a nudged point (so not a kink) is a wrong backward. The
finding points at the line of backward that computes the first wrong input's gradient
(else at the `def backward` line).
"""
from __future__ import annotations

from leaky.checks import register
from leaky.checks._util import line_of, num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats


@register("LK305", "wrong-gradient", "a custom autograd.Function whose backward disagrees with finite differences")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    for fn in stats.functions:
        if not fn.wrong:
            continue
        parts = "; ".join(f"input {w['input']}: backward gives {num(w['analytic'])}, finite differences "
                          f"{num(w['numeric'])} (relative error {num(w['relative_error'])})" for w in fn.wrong)
        message = (f"{fn.name}.backward disagrees with finite differences of {fn.name}.forward at the inputs "
                   f"it was called with ({fn.note}): {parts}. Every gradient through it is wrong.")
        fix = (f"Re-derive {fn.name}.backward: it must return, for each input, the gradient of the output "
               "times grad_output (the chain rule through every term of forward). Check it with "
               f"torch.autograd.gradcheck({fn.name}.apply, inputs) on float64 inputs.")
        called = None if fn.source is None else {"file": fn.source.file, "line": fn.source.line}
        first = fn.wrong[0]["input"]
        line = fn.gradient_sources[first] if first < len(fn.gradient_sources) else None
        if line is not None:
            message += f" The gradient of input {first} is computed at {line_of(line)}."
        findings.append(Finding("wrong-gradient", "LK305", Severity.ERROR, message, fix, fn.module, fn.name,
                                line or fn.backward_source or fn.source, None,
                                {"function": fn.name, "wrong_inputs": list(fn.wrong), "precision": fn.note,
                                 "called_at": called}))
    return findings
