"""LK101 saturated-activation: sigmoid/tanh/softmax units pinned where the derivative is ~0.

    d/dz sigmoid(z) = s(1-s) <= 1/4      d/dz tanh(z) = 1 - tanh(z)^2 <= 1
    d/dz softmax(z) = J = diag(p) - ppᵀ,  tr J = 1 - ||p||² <= 1 - 1/n

A unit-sample is flat when its local derivative is below `flat_derivative_share` of that
maximum (|z| >~ 6 for sigmoid, 3 for tanh). Every gradient through a flat unit-sample is
multiplied by that tiny number. A softmax row is flat by the same rule on tr J: J is
positive semidefinite, so no direction of the scores gets more than tr J of the gradient
(over two entries the share is the sigmoid's). A softmax is judged at the first step it ran,
normally the initialisation, before training could have made it peaked: unscaled attention
scores (no 1/sqrt(d)) or logits multiplied by a temperature are flat from there, while
attention that learns to be peaked starts near uniform. Peakedness seen only later is
reported as info, and only when the softmax's backward gain shows the gradient is blocked.

Saturation can also develop. A softmax on the loss path (an output distribution: a policy's
action probabilities, a classifier's) whose rows start with room to move, but whose rows
over the last observed steps are flat, all on the same entry, has collapsed: its output no
longer depends on its input, and its Jacobian starves every gradient through it. The mean
row p̄ over the window tells the collapse apart from a classifier that grew confident on
inputs of several classes: one-hot rows on different entries average to a spread-out p̄, one-
hot rows on one entry to a one-hot p̄, judged by the same rule ((1 − ||p̄||²) / (1 − 1/n) below
`flat_derivative_share`). A policy-gradient loss is no measure of progress here: −log p(a)·A
falls toward 0 as p(a) → 1 whether the return improves or not.

A sigmoid or tanh whose output is multiplied by (or added to) another path from its own input
is one factor of a composite (x·σ(x), 0.5·x·(1 + tanh(u(x))), record/bypass.py): where its own
derivative is ~0 the gradient reaching x goes through the other factor. Its flat share is then
info, and the composite is judged by its gain |dL/dx| / |dL/d(out)|: flat only below
`flat_derivative_share` of an identity's 1. A gated unit a·σ(b) with b computed apart from a has
nothing going around σ: judged as above.

What it explains (`@explainer`): the vanishing gradient (LK103) a saturated sigmoid/tanh layer
on its path causes, when at its family's largest derivative the path would not vanish; and a
collapse explains the high update ratios (LK202) of the layer that computes the scores, or of
weights whose rate is set at the same line, which the falling loss does not excuse.
"""
from __future__ import annotations

from leaky import ops
from leaky.checks import explainer, headline, register
from leaky.checks._collapse import collapsed, scores_param
from leaky.checks._layers import activation_of
from leaky.checks._optim import lr_cause
from leaky.checks._util import line_of, num, pct, severity_above
from leaky.config import AuditConfig
from leaky.finding import Cause, Finding, Severity
from leaky.stats import ActivationStats, AuditStats



def _smooth_family(name: str):
    """A sigmoid-like family: its local derivative has a maximum, and flat tails (ops)."""
    family = ops.family(name)
    return family if family is not None and family.max_derivative is not None else None


@register("LK101", "saturated-activation", "sigmoid/tanh/softmax units sit where the local derivative is ~0")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    findings = []
    for act in stats.activations:
        family = ops.family(act.family)
        if _smooth_family(act.family) is not None and act.flat_share is not None:
            severity = severity_above(act.flat_share, config.saturated_warning, config.saturated_error)
            if severity is not None:
                findings.append(_smooth(act, severity, stats, config))
        elif family is not None and family.rows and _flat_from_start(act, config) is not None:
            findings.append(_softmax_from_start(act, _flat_from_start(act, config), stats, config))
        elif family is not None and family.rows and collapsed(act, stats, config) is not None:
            findings.append(_softmax_collapsed(act, collapsed(act, stats, config), stats, config))
        elif (family is not None and family.rows and act.peaked_share is not None
              and act.peaked_share >= config.softmax_peaked_share):
            op = stats.op(act.site)
            if op is not None and op.gain is not None and op.gain < config.softmax_blocked_gain:
                findings.append(_softmax(act, op.gain, config))
    return findings


def _smooth(act: ActivationStats, severity: Severity, stats: AuditStats, config: AuditConfig) -> Finding:
    found = _own(act, severity, stats, config)
    if act.bypass_site is None:
        return found
    return _bypassed(found, act, stats, config)


def _bypassed(found: Finding, act: ActivationStats, stats: AuditStats, config: AuditConfig) -> Finding:
    """Its output is multiplied by (or added to) another path from its own input (record/bypass.py):
    the gradient reaching that input goes around the flat tails. Judged by the composite's gain,
    |dL/dx| / |dL/d(out)|: flat only below `flat_derivative_share` of an identity's 1 (as x·σ(x) is
    for x → −∞, a ReLU's off side, not a saturation)."""
    composite = stats.op(act.bypass_site)
    shared = stats.op(act.bypass_input_site) if act.bypass_input_site is not None else None
    gain = act.bypass_gain
    at = line_of(composite.source) if composite is not None and composite.source is not None else None
    into = f"its own input ({shared.module or shared.op})" if shared is not None else "its own input"
    flat = gain is not None and gain < config.flat_derivative_share
    measured = (f"the composite passes on {num(gain)} of the gradient at its output to that input" if gain is not None
                else "the composite's gain was not measured")
    verdict = ("so it blocks the gradient too" if flat else
               "so the saturation is bypassed: the gradient reaches the layer below through the other factor")
    message = (f"{found.message} Its output is combined{f' at {at}' if at else ''} with {into}, which goes around "
               f"it (as in x·σ(x) or 0.5·x·(1 + tanh(u(x)))): {measured}, {verdict}.")
    fix = found.fix if flat else ("Nothing to change for this op: the composite it is part of is judged by the gradient "
                                  "that reaches its input, and that gradient flows.")
    evidence = {**found.evidence, "bypass_gain": gain, "bypassed_at": at,
                "bypass_input_module": shared.module if shared is not None else None}
    return Finding(found.name, found.code, found.severity if flat else Severity.INFO, message, fix, found.module,
                   found.op, found.source, None, evidence)


def _own(act: ActivationStats, severity: Severity, stats: AuditStats, config: AuditConfig) -> Finding:
    family = _smooth_family(act.family)
    peak = family.max_derivative
    median = None if act.median_derivative_share is None else act.median_derivative_share * peak
    op = stats.op(act.site)
    gain = op.gain if op is not None else None
    where = act.module or "the model"
    passes = f", so {where} passes on {num(gain)} of the gradient it receives" if gain is not None else ""
    message = (f"{family.formula}; here the median is {num(median)}, and {pct(act.flat_share)} of "
               f"{act.units} units × {act.samples} samples sit where it is below "
               f"{num(config.flat_derivative_share * peak)}{passes}.")
    fix = ("Keep pre-activations near 0: initialise the layer that feeds this "
           f"{act.family} with nn.init.xavier_uniform_ (fan-in scaling), standardise the inputs, "
           "or add a LayerNorm/BatchNorm before it; for hidden layers, ReLU or GELU do not saturate.")
    evidence = {"flat_share": act.flat_share, "stuck_unit_share": act.stuck_share,
                "median_local_derivative": median, "max_local_derivative": peak, "units": act.units,
                "samples_per_unit": act.samples, "backward_gain": gain}
    return Finding("saturated-activation", "LK101", severity, message, fix, act.module, act.op,
                   act.source, None, evidence)


def _softmax(act: ActivationStats, gain: float, config: AuditConfig) -> Finding:
    message = (f"{pct(act.peaked_share)} of softmax rows put > {config.peaked_row_probability:g} on one entry; "
               "its Jacobian "
               f"diag(s) − ssᵀ is then ~0 and the backward gain here is {num(gain)}.")
    fix = "Scale the logits down (a temperature, or 1/sqrt(d) in attention) or normalise what feeds them."
    return Finding("saturated-activation", "LK101", Severity.INFO, message, fix, act.module, act.op,
                   act.source, None, {"peaked_share": act.peaked_share, "backward_gain": gain})


def _flat_from_start(act: ActivationStats, config: AuditConfig) -> Severity | None:
    if act.first_flat_share is None:
        return None
    return severity_above(act.first_flat_share, config.saturated_warning, config.saturated_error)


def _softmax_from_start(act: ActivationStats, severity: Severity, stats: AuditStats, config: AuditConfig) -> Finding:
    op = stats.op(act.site)
    gain = op.gain if op is not None else None
    n = act.detail.get("dim_size")
    where = act.module or "the model"
    passes = f", and over the steps its backward passed on {num(gain)} of the gradient it received" if gain is not None else ""
    message = (f"at its first step, before training could shape it, {pct(act.first_flat_share)} of the rows of this "
               f"{act.op} in {where} were one-hot: the trace of their Jacobian diag(p) − ppᵀ, 1 − ‖p‖², was below "
               f"{num(config.flat_derivative_share)} of a uniform row's 1 − 1/n{_of_n(n)}, and no direction of "
               f"the scores gets more than that trace of the gradient; the mean row had "
               f"{num(act.first_jacobian_share)} of it{passes}.")
    # NOTE: an op whose own argument makes its rows flat (gumbel_softmax's tau) says how to fix it,
    # and the scores are no cause: (logits + g) / 0.05 is one-hot whatever the logits
    own_fix = _rule_extra(act.op).get("flat_fix")
    fix = own_fix or ("Scale the scores down where they are computed: divide attention scores by math.sqrt(d_head) "
                      "(or use F.scaled_dot_product_attention), divide logits by a temperature rather than multiply, "
                      "or normalise what feeds them (LayerNorm, or q/k normalisation).")
    evidence = {"first_step_flat_row_share": act.first_flat_share, "first_step_jacobian_share": act.first_jacobian_share,
                "peaked_share": act.peaked_share, "row_length": n, "backward_gain": gain,
                "scores_module": _scores_module(act, stats)}
    return Finding("saturated-activation", "LK101", severity, message, fix, act.module, act.op,
                   act.source, None, evidence, None if own_fix else _scores_cause(act, stats))


def _rule_extra(op: str) -> dict:
    rule = ops.rule(op)
    return {} if rule is None else rule.extra


def _softmax_collapsed(act: ActivationStats, severity: Severity, stats: AuditStats, config: AuditConfig) -> Finding:
    n = act.detail.get("dim_size")
    first, last = act.recent_span or (None, None)
    steps = f"steps {first}-{last}" if first != last else f"step {last}"
    where = act.module or "the model"
    message = (f"this {act.op} in {where} collapsed during training: at its first step {pct(act.first_flat_share)} of "
               f"its rows were one-hot, over {steps} {pct(act.recent_flat_share)} were (the trace of their Jacobian "
               f"diag(p) − ppᵀ, 1 − ‖p‖², below {num(config.flat_derivative_share)} of a uniform row's 1 − 1/n"
               f"{_of_n(n)}), and all on the same entry: the mean row over those steps has "
               f"{num(act.recent_mean_row_share)} of a uniform row's trace. Its output no longer depends on its input, "
               "and p(1 − p) starves the gradient through it: a policy that always takes one action, or a classifier "
               "that answers one class, cannot learn to act otherwise. A loss of −log p(a)·A falls toward 0 as "
               "p(a) → 1 whether the return improves or not.")
    fix = ("Take smaller steps on the layer that computes the scores (lower its learning rate, clip its gradient), "
           "and keep the distribution from collapsing early: add an entropy bonus to the loss "
           "(loss = loss − β·entropy.mean(), β ≈ 0.01; check its sign: + β·entropy pushes toward collapse).")
    evidence = {"first_step_flat_row_share": act.first_flat_share, "recent_flat_row_share": act.recent_flat_share,
                "recent_mean_row_jacobian_share": act.recent_mean_row_share, "recent_steps": act.recent_span,
                "row_length": n, "developed": True, "scores_module": _scores_module(act, stats)}
    return Finding("saturated-activation", "LK101", severity, message, fix, act.module, act.op,
                   act.source, None, evidence, _rate_cause(act, stats, config))


def _rate_cause(act: ActivationStats, stats: AuditStats, config: AuditConfig) -> Cause | None:
    """The learning rate of the layer that computed the scores: what moved them this far."""
    param = scores_param(act, stats)
    return None if param is None else lr_cause(stats, param, "high", config)


def _scores_module(act: ActivationStats, stats: AuditStats) -> str | None:
    site = act.detail.get("scores_site")
    op = stats.op(site) if site is not None else None
    return None if op is None else op.module


def _of_n(n) -> str:
    return f" = {num(1 - 1 / n)} (n = {n})" if isinstance(n, int) and n > 1 else ""


def _scores_cause(act: ActivationStats, stats: AuditStats) -> Cause | None:
    """The line that computed the scores, where it is not the softmax's own line."""
    site = act.detail.get("scores_site")
    op = stats.op(site) if site is not None else None
    if op is None or op.source is None or op.source == act.source:
        return None
    return Cause.at(op.source, "the scores fed to this softmax are computed here: scale them down")


@explainer("LK101")
def _explains_the_vanishing_it_causes(root: Finding, symptom: Finding) -> str | None:
    """A saturated sigmoid/tanh layer on the vanishing path (LK103 names it where the gradient
    is lost) explains the vanishing gradient when, at the gain its family passes unsaturated,
    the path would not vanish: the ratio is the product of the local gains along the path, so
    without this layer's flat units it would be ratio · peak / gain, at or above LK103's line."""
    gain, peak = root.evidence.get("backward_gain"), root.evidence.get("max_local_derivative")
    ratio, line = symptom.evidence.get("ratio"), symptom.evidence.get("vanishing_warning")
    if "bypass_gain" in root.evidence and root.severity is Severity.INFO:
        return None   # its own input goes around it: its flat tails lose nothing on the path
    if symptom.code != "LK103" or not gain or not peak or not ratio or line is None or root.source is None:
        return None
    on_path = any(op.get("module") == root.module and op.get("op") == root.op and op.get("line") == root.source.line
                  for op in symptom.evidence.get("lossy_ops") or ())
    unsaturated = min(ratio * peak / gain, 1.0)
    if not on_path or unsaturated < line:
        return None
    return (f"{root.module or root.op} passes on {num(gain)} of the gradient, where out of its flat region it "
            f"would pass up to {num(peak)}; the first layer would then get up to {num(unsaturated)} of the last's, "
            f"above the {num(line)} below which it vanishes")


@explainer("LK101")
def _explains_the_steps_that_collapsed_it(root: Finding, symptom: Finding) -> str | None:
    """A too-high update ratio (LK202) of the layer that computes a collapsed softmax's scores,
    or of a weight whose rate is set at the same line: the steps, or the rate, that drove the
    collapse (the rows all on one entry). The falling loss is no evidence that they train."""
    if symptom.code != "LK202" or symptom.evidence.get("direction") != "high" or not root.evidence.get("developed"):
        return None
    scores = root.evidence.get("scores_module")
    same_rate = root.cause is not None and symptom.cause is not None and \
        (root.cause.file, root.cause.line) == (symptom.cause.file, symptom.cause.line)
    if symptom.module is not None and symptom.module == scores:
        return f"these steps on {scores}, which computes the softmax's scores, drove it onto one entry"
    if same_rate:
        return (f"the learning rate set at {line_of(root.cause.source)} drove the "
                "softmax onto one entry, and moves this weight as fast")
    return None


@headline("LK101", "unit-samples in the flat region")
def _headline(finding: Finding, stats: AuditStats):
    """A sigmoid's or tanh's flat unit-samples; a softmax's one-hot rows, where the finding
    judged them: at its first step, or over the last observed steps (a collapse)."""
    act = activation_of(finding, stats)
    if act is None:
        return None
    if finding.evidence.get("developed"):
        share, label = act.recent_flat_share, "rows one-hot over the last observed steps"
    elif "first_step_flat_row_share" in finding.evidence:
        share, label = act.first_flat_share, "rows one-hot at the first step"
    else:
        return pct(act.flat_share) if act.flat_share is not None else None
    return None if share is None else (label, pct(share))
