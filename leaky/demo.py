"""`leaky demo`: the built-in broken models, each audited next to its fix.

Karpathy's four ("Yes you should understand backprop", 2016): a sigmoid network with
large initial weights, ReLUs killed by an aggressive learning rate, a vanilla RNN whose
recurrent matrix has spectral radius > 1, and a DQN whose TD error is clamped. Then one
check from his "Recipe for Training Neural Networks" (2019): batch independence, a GRU fed
`x.view(T, B, F)` where `x.transpose(0, 1)` was meant.
Run: `leaky demo` (or `leaky demo --only dqn-clamped-td`).
"""
from __future__ import annotations

import os

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from leaky.audit import audit
from leaky.finding import Finding, Severity
from leaky.report.terminal import finding_renderable

KARPATHY_FOUR = ("sigmoid-big-init", "relu-high-lr", "rnn-exploding", "dqn-clamped-td")
RECIPE = ("gru-view-for-transpose",)


def unmet(example, findings: list[Finding]) -> list:
    """The expectations of an example that no audit finding satisfies (module and line must
    match); those of `leaky probe`'s checks are left to it (tests/unit/probe/test_probe.py)."""
    from leaky.zoo import marker_line

    from leaky.checks import CHECKS

    missing = []
    for expect in example.expect:
        if CHECKS[expect.code].probe:
            continue   # LK308, LK309: judged by `leaky probe` on its own runs, not by an audit
        def fits(finding: Finding) -> bool:
            if finding.code != expect.code or finding.severity is Severity.INFO:
                return False
            if expect.module is not None and finding.module != expect.module:
                return False
            if expect.marker is not None:
                line = marker_line(example, expect.marker)
                return finding.source is not None and finding.source.line == line and \
                    os.path.samefile(finding.source.file, example.file)
            return True
        if not any(fits(f) for f in findings):
            missing.append(expect)
    return missing


def serious(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is not Severity.INFO]


def audit_example(example, steps: int, seed: int = 0):
    """Audit one zoo example; an example whose script itself fails is reported up to there."""
    with audit(steps=steps) as observed:
        try:
            example.run(steps=steps, seed=seed)
        except Exception:
            if not example.raises:
                raise
    return observed.report


def _show_pair(console: Console, broken, fixed, steps: int) -> bool:
    console.print(Rule(Text(f"{broken.name}: {broken.title}"), align="left"))
    report = audit_example(broken, steps)
    for finding in report.findings:
        console.print(finding_renderable(finding))
    missing = unmet(broken, report.findings)
    for expect in missing:
        console.print(Text(f"  expected {expect.code} at {expect.module or 'the loss code'} was not found",
                           style="bold red"))
    ok = not missing
    if fixed is not None:
        fixed_report = audit_example(fixed, steps)
        left = serious(fixed_report.findings)
        if left:
            ok = False
            console.print(Text(f"  the fix, {fixed.name}, still has {len(left)} finding(s):", style="red"))
            for finding in left:
                console.print(finding_renderable(finding))
        else:
            console.print(Text(f"  ✓ fixed in {fixed.name} ({fixed.title}): audited clean, no warnings "
                               f"or errors; loss {fixed_report_loss(fixed_report)}", style="green"))
    return ok


def fixed_report_loss(report) -> str:
    losses = report.run.get("losses") or []
    return f"{losses[0]:.3g} → {losses[-1]:.3g}" if len(losses) > 1 else "n/a"


def run_demo(console: Console, steps: int = 20, only: str | None = None) -> int:
    from leaky.zoo import get

    names = (only,) if only else KARPATHY_FOUR + RECIPE
    try:
        pairs = [(get(name), get(get(name).fixed_by) if get(name).fixed_by else None) for name in names]
    except KeyError as exc:
        console.print(Text(f"leaky: {exc.args[0]}", style="red"))
        return 2
    results = [_show_pair(console, broken, fixed, steps) for broken, fixed in pairs]
    good = sum(results)
    style = "green" if good == len(results) else "red"
    console.print(Rule())
    console.print(Text(f"leaky demo: {good} of {len(results)} examples found and fixed as expected.", style=style))
    console.print(Text(f"To see each fix tried and measured from the same start: leaky fix --example {names[0]}",
                       style="dim"))
    return 0 if good == len(results) else 1
