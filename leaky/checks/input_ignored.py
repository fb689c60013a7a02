"""LK309 input-ignored: the same K steps with every input replaced by zeros do as well.

`leaky probe` trains the program for K steps twice from the same start: on its real
inputs, and with each model input replaced by zeros (token ids by token 0), the targets
untouched. A model on zeros sees the same input for every sample, so the best it can learn
is one output for all: the label prior (cross-entropy H(y), the class frequencies),
the target mean (MSE Var(t)). Its held-out loss is that baseline. A model that uses its
input does better, by more than the run-to-run noise (`leaky fix`'s: the spread of the
real runs with shifted seeds, at least 1% of the loss). If the real inputs do no better,
the input does not reach the output: overwritten (`x = x * 0`, a constant buffer in its
place), cut (features detached, so only a bias learns), or constant after preprocessing.

"No better" is evidence only where the run could have shown better (`undecided`). Unless the
input's loss is structural (an op that makes it constant, a forward that drops it, inputs and
targets that are not the same samples, a cut path), it is not decided when:

- the targets are computed from a model's outputs (reinforcement learning's returns, TD
  targets and sampled actions, a teacher's soft labels): the zeros change them too, and a
  model on zeros that fits its own constant targets says nothing of the input;
- the real inputs' loss fell by no more than the noise in K steps: with either input, the
  model learned too little to differ (Adam moves a weight by at most ~lr a step, so a bigram
  table at lr 5e-4 moves each logit by 0.05 in 100 steps, and a cross-entropy by at most
  2 x 0.05, under 1% of log 27);
- it is still falling so fast that K more steps would lower it by more than the noise;
- K is under LK308's `overfit_min_steps` (100): a slow learner has learned, this early,
  only what zeros teach too (the label prior).
"""
from __future__ import annotations

import os

from leaky.checks import register
from leaky.checks._util import num
from leaky.finding import Finding, Severity, Source
from leaky.probe.config import ProbeConfig
from leaky.probe.stats import ZeroedInputStats

# Audit findings that stop the input's layers from learning (LK103: the gradient is lost
# before it reaches them).
_CUTS = ("LK108", "LK106", "LK102", "LK101", "LK103", "LK303")


_PAIR_FIX = ("Select and shuffle the inputs and the targets with one index: perm = torch.randperm(len(X)); "
             "X, y = X[perm], y[perm] (or one TensorDataset(X, y) in one DataLoader with shuffle=True), never "
             "one permutation or loader each.")


@register("LK309", "input-ignored", "zeroed inputs train as well as the real ones (leaky probe)", probe=True)
def check(stats: ZeroedInputStats, config: ProbeConfig) -> list[Finding]:
    if stats.real < stats.zeroed - stats.margin:
        return []
    # NOTE: real inputs that do WORSE than zeros are the signature only where the input cannot
    # be learned from: it does not reach the output, or its path is cut (LK108), so that it
    # reaches the output through untrained weights only. Otherwise the input is used, just
    # not learned yet in K steps (a slow start): `leaky probe` says "could not run".
    worse = stats.real > stats.zeroed + stats.margin
    if worse and stats.reached is not False and not _cut(stats):
        return []
    if undecided(stats, config) is not None:
        return []
    module, source, where, placed_fix = _place(stats)
    scored = "held-out" if stats.held_out else "last training"
    than = "worse than" if worse else "no better than"
    message = (f"trained on its real inputs the model's {scored} loss is {num(stats.real)}, {than} with every "
               f"input replaced by zeros ({num(stats.zeroed)}; noise {num(stats.margin)}): the model does not use "
               f"its input{where}.")
    fix = placed_fix or (
        "Follow the input through forward: a line that overwrites it (x = x * 0, torch.zeros_like(x), a "
        "buffer used in its place), a feature path cut with .detach() or no_grad so that only a bias "
        "learns, or preprocessing that makes every sample the same (a normalisation by the wrong axis, a "
        "mask that is all zero). Print x.std(0) where the model receives it.")
    evidence = {"real_loss": stats.real, "zeroed_loss": stats.zeroed, "margin": stats.margin,
                "gain": stats.gain, "scores": list(stats.scores), "held_out": stats.held_out,
                "zeroed": list(stats.zeroed_kinds), "lost_at": stats.lost, "input_reaches_output": stats.reached,
                "mispaired": stats.mispaired, "targets_from_model": stats.targets_from_model,
                "audit": [a.to_dict() for a in stats.audit]}
    return [Finding("input-ignored", "LK309", Severity.ERROR, message, fix, module, stats.lost["op"]
                    if stats.lost else None, source, None, evidence)]


def _cut(stats: ZeroedInputStats) -> bool:
    return any(a.code == "LK108" and a.severity != "info" for a in stats.audit)


def _structural(stats: ZeroedInputStats) -> bool:
    """Whether the trace shows where the input is lost, whatever the losses say."""
    return bool((stats.lost is not None and stats.lost.get("file")) or stats.reached is False
                or (stats.mispaired is not None and stats.mispaired.get("file")) or _cut(stats))


def undecided(stats: ZeroedInputStats, config: ProbeConfig | None = None) -> str | None:
    """Why real inputs that do no better than zeros are no evidence here, or None (see the
    module doc). Said by `leaky probe` as the reason it could not decide."""
    if _structural(stats):
        return None
    steps = len(stats.losses)
    if config is not None and 0 < steps < config.overfit_min_steps:
        # NOTE: LK308's own limit: a model that learns from its input slowly has, this early,
        # learned only what zeros teach (the label prior): mnist_rnn at K = 60, real 2.295 vs
        # zeroed 2.312 (noise 0.023), at K = 200 2.21 vs 2.31
        return (f"{steps} steps cannot tell a model that learns from its input slowly from one that ignores it, "
                f"and nothing shows the input lost: use --steps {config.overfit_min_steps} or more")
    origin = stats.targets_from_model
    if origin is not None:
        at = f" at {os.path.basename(origin['file'])}:{origin['line']}" if origin.get("file") else ""
        called = origin.get("called_at") or {}
        by = f", called at line {called['line']}" if called.get("line") else ""
        return (f"the targets are computed from a model's outputs (the target made{at} comes from "
                f"{origin['model']}{by}): "
                "zeroing the inputs changes the targets too, and a model fed zeros that fits its own targets "
                "as well is no evidence that the input is ignored")
    fallen, steps = stats.fallen, len(stats.losses)
    if fallen is not None and fallen <= stats.margin:
        return (f"in {steps} steps the real inputs' loss fell by only {num(fallen)} (from {num(stats.start)} to "
                f"{num(stats.real)}), within the noise ({num(stats.margin)}): with either input the model learned "
                "too little to show a difference; run with a larger --steps")
    falling = stats.still_falling
    if falling > stats.margin:
        return (f"the real inputs' loss is still falling: at the pace of its last {steps - steps // 2} steps, "
                f"{steps} more steps would lower it by {num(falling)}, more than the noise ({num(stats.margin)}); "
                "run with a larger --steps")
    return None


def _place(stats: ZeroedInputStats) -> tuple[str | None, Source | None, str, str | None]:
    """(module, source, the words that say where, a fix of its own): the op that made the
    input constant; the model's forward, when the input never reached its output; the
    selection of rows that paired the inputs with other samples' targets; an audited cut;
    else none, said plainly."""
    lost = stats.lost
    if lost is not None and lost.get("file"):
        return (lost["module"], Source(lost["file"], lost["line"]),
                f": {lost['op']} at {os.path.basename(lost['file'])}:{lost['line']} makes it the same for "
                "every sample", None)
    if stats.reached is False and stats.forward is not None:
        forward = stats.forward
        return ("", Source(forward["file"], forward["line"]),
                f": {forward['model']}.forward does not pass it on to its output", None)
    paired = stats.mispaired
    if paired is not None and paired.get("file"):
        others = "the targets" if paired["side"] == "the inputs" else "the inputs"
        other, at = paired.get("other"), f"{os.path.basename(paired['file'])}:{paired['line']}"
        if other and (other["file"], other["line"]) == (paired["file"], paired["line"]):
            how = f"The inputs and the targets were each reordered or selected on their own at {at}"
        elif other:
            how = (f"{paired['side'].capitalize()} were reordered or selected at {at}, {others} separately at "
                   f"{os.path.basename(other['file'])}:{other['line']}")
        else:
            how = f"{paired['side'].capitalize()} were reordered or selected at {at} and {others} were not"
        return (None, Source(paired["file"], paired["line"]),
                f": the inputs and the targets are not the same samples. {how}: the first batch's inputs are rows "
                f"{paired['inputs']} of their data, its targets rows {paired['targets']} of theirs, so each input "
                "is paired with another sample's target", _PAIR_FIX)
    cut = next((a for a in stats.audit if a.code in _CUTS and a.severity != "info"), None)
    if cut is not None:
        return (cut.module, Source(*cut.source) if cut.source else None,
                f"; the audit shows {cut.code} {cut.name} at {cut.where}", None)
    return (None, None, "; leaky cannot tell which line: the input varies between samples and reaches the output, "
            "its rows match the targets' as far as leaky could follow them, and the audit shows no cut", None)
