"""`leaky fix`: audit, propose the mechanical fixes, run each as a counterfactual, judge.

    result = try_fixes(program, FixConfig(steps=200))

The runs, all from the program's start with the same seeds unless said:

1. the unfixed program, audited: the diagnosis and the baseline score;
2. the same run again: if its losses differ from the first by a single bit, the program
   cannot be re-run from the same state (it reads live data, a clock, an unseeded
   source) and no fix is judged;
3. `repeats` unfixed runs with shifted seeds: the run-to-run noise (`verdict`);
4. one run per candidate fix (`remedies`, one file per check); a fix that changes how
   the loss itself is computed (removing a softmax before the loss) is compared with an
   unfixed run whose held-out loss is computed the fixed way, so both are scored by the
   same function.

Every run is scored by one `measure`: the held-out loss, or, where a dead zone on the loss
path flattens it (a clamped TD error), that loss with the flat op passed through; runs 2-4
are then all scored that way, and run 1 keeps the program's own loss (`baseline`).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

from leaky.finding import Finding
from leaky.fix import measure as measures
from leaky.fix import metrics
from leaky.fix.change import Change
from leaky.fix.remedies import Candidate, Context, propose, without_remedy
from leaky.rerun import verdict
from leaky.rerun.trial import Changes, Trial, run_trial, same_losses

SCHEMA = "leaky/fix-v1"


@dataclass(frozen=True)
class FixConfig:
    steps: int = 200         # K: training steps of every run
    holdout: int = 20        # H: held-out steps after step K, model frozen, that score a run
    repeats: int = 2         # unfixed runs with shifted seeds, for the noise
    audit_steps: int = 20    # steps audited in each run (the leak metrics)


@dataclass
class Outcome:
    candidate: Candidate
    trial: Trial
    unfixed_score: float | None     # the score it is compared with
    verdict: str
    metrics: list[tuple[str, str, str, str]]   # (finding code + where, what, before, after)
    change: Change | None = None
    margin: float | None = None     # the difference it had to beat (its own for a changed loss)
    measure: str = "loss"           # what the two scores are (FixResult.measure's label)


@dataclass
class FixResult:
    program: str
    config: FixConfig
    baseline: Trial
    noise: verdict.Noise | None = None
    reproducible: bool | None = None
    difference: str | None = None          # where two identical runs differed
    outcomes: list[Outcome] = field(default_factory=list)
    unfixable: list[Finding] = field(default_factory=list)
    why_not: dict[int, str] = field(default_factory=dict)   # id(finding) -> why it has no mechanical fix
    seconds: float = 0.0
    measure: measures.Measure = measures.OWN_LOSS   # what every verdict compares
    reference: Trial | None = None         # the unfixed run scored by `measure` (the baseline, or run 2)

    @property
    def findings(self) -> list[Finding]:
        return self.baseline.report.findings if self.baseline.report is not None else []

    def to_dict(self) -> dict:
        base = self.baseline
        return {
            "schema": SCHEMA,
            "program": self.program,
            "config": {"steps": self.config.steps, "holdout": self.config.holdout,
                       "repeats": self.config.repeats, "audit_steps": self.config.audit_steps},
            "baseline": _trial_dict(base),
            "held_out": base.held_out,
            "reproducible": self.reproducible,
            "difference": self.difference,
            "noise": None if self.noise is None else self.noise.to_dict(),
            "measure": self.measure.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "fixes": [_outcome_dict(o) for o in self.outcomes],
            "without_fix": [{"code": f.code, "name": f.name, "where": f.where, "why": self.why_not.get(id(f))}
                            for f in self.unfixable],
            "seconds": self.seconds,
        }


def _trial_dict(trial: Trial) -> dict:
    return {"score": trial.score, "steps": trial.steps, "held_out_steps": len(trial.holdout),
            "status": trial.status, "error": trial.error, "seconds": trial.seconds,
            "first_loss": trial.losses[0] if trial.losses else None,
            "last_loss": trial.losses[-1] if trial.losses else None, "held_out_as": trial.held_out_as}


def _outcome_dict(outcome: Outcome) -> dict:
    candidate = outcome.candidate
    return {"fix": candidate.title, "key": [str(k) for k in candidate.key],
            "findings": [{"code": f.code, "name": f.name, "where": f.where} for f in candidate.findings],
            "applied": outcome.trial.applied, "note": candidate.note, "changes_loss": candidate.changes_loss,
            "metrics": [{"finding": m[0], "measure": m[1], "before": m[2], "after": m[3]} for m in outcome.metrics],
            "loss_unfixed": outcome.unfixed_score, "loss_fixed": outcome.trial.score, "margin": outcome.margin,
            "measure": outcome.measure,
            "seconds": outcome.trial.seconds, "verdict": outcome.verdict,
            "change": None if outcome.change is None else outcome.change.to_dict(),
            "run": _trial_dict(outcome.trial)}


def context_of(trial: Trial) -> Context:
    """What remedies may read of the unfixed run: statistics, the model's names and sites."""
    tracker = trial.modules
    types, construction, roots = {}, {}, []
    for info in getattr(tracker, "infos", []):
        name = tracker.name(info.key)
        types.setdefault(name, info.type_name)
        if info.path == "" and any(True for _ in info.module.parameters()):
            roots.append(tracker.root_labels.get(info.key))
        site = trial.module_sites.get(id(info.module))
        if site is not None:
            construction.setdefault(name, site)
    return Context(trial.stats, trial.report.findings, trial.backward_site,
                   roots[0] if len(roots) == 1 else None, types, construction)


def try_fixes(program: Callable[[], None], config: FixConfig = FixConfig(), name: str = "program",
              progress: Callable[[str], None] | None = None,
              on_step: Callable[[int, int], None] | None = None) -> FixResult:
    """`progress(text)` is told when each run starts, `on_step(done, total)` after each of its steps."""
    say = progress or (lambda text: None)
    start = time.perf_counter()

    def trial(make_fix=None, offset=0, label=None, holdout_fix=None) -> Trial:
        return run_trial(program, make_fix, offset, config.steps, config.holdout, config.audit_steps, label,
                         holdout_fix, on_step, freeze_modules=True)

    say(f"unfixed run: {config.steps} steps + {config.holdout} held out, auditing the first {config.audit_steps}")
    base = trial()
    result = FixResult(name, config, base)
    if base.report is None or not base.steps:
        result.seconds = time.perf_counter() - start
        return result
    context = context_of(base)
    candidates = propose(base.report.findings, context)
    result.unfixable = without_remedy(base.report.findings, candidates)
    result.why_not = context.why_not
    if not candidates:
        result.seconds = time.perf_counter() - start
        return result
    result.measure = measures.choose(base.report.findings, context)
    held = result.measure.build if result.measure.unflattened else None
    say("the same run again, to check it can be re-run from the same state"
        + (f"; scored by the {result.measure.label}" if held else ""))
    again = trial(holdout_fix=held)
    # NOTE: scored another way, run 2's held-out losses differ from run 1's by design; its
    # K training steps are still compared bit for bit.
    result.reproducible, result.difference = same_losses(base, again, held_out=held is None)
    result.reference = again if held else base
    scores = [result.reference.score]
    for offset in range(1, config.repeats + 1):
        say(f"unfixed run with seeds shifted by {offset} (noise)")
        scores.append(trial(offset=offset, holdout_fix=held).score)
    result.noise = verdict.noise(scores)
    for index, candidate in enumerate(candidates, 1):
        say(f"fix {index}/{len(candidates)}: {candidate.title}")
        result.outcomes.append(_try(candidate, base, result, trial, say))
    result.seconds = time.perf_counter() - start
    return result


def _try(candidate: Candidate, base: Trial, result: FixResult, trial, say) -> Outcome:
    held = result.measure.build if result.measure.unflattened else None
    fixed = trial(candidate.build, label=candidate.title, holdout_fix=held)
    unfixed_score, margin = result.reference.score, result.noise.margin
    if candidate.changes_loss:
        # NOTE: scored by another function, the unfixed runs need their own noise too.
        scores = []
        for offset in range(result.config.repeats + 1):
            say(f"unfixed run with seeds shifted by {offset}, scored the fixed way")
            scores.append(trial(label="unfixed, scored the fixed way", holdout_fix=_both(candidate.build, held),
                                offset=offset).score)
        unfixed_score = scores[0]
        margin = verdict.noise(scores).margin
    if not result.reproducible:
        decided = verdict.NOT_JUDGED
    elif not fixed.applied or (fixed.status == "failed" and base.status != "failed"):
        decided = verdict.NOT_JUDGED   # the fix never acted, or it broke the program (run.error says how)
    else:
        decided = verdict.judge(unfixed_score, fixed.score, margin)
    rows = []
    for finding in candidate.findings:
        label, before = metrics.measure(finding, base.stats, base.report.findings)
        _, after = metrics.measure(finding, fixed.stats, fixed.report.findings if fixed.report else [])
        rows.append((f"{finding.code} {_place(finding)}", label, before, after))
    change = candidate.change() if decided == verdict.HELPS else None
    label = ("loss computed the fixed way" if candidate.changes_loss else "loss") if not held else result.measure.label
    return Outcome(candidate, fixed, unfixed_score, decided, rows, change, margin, label)


def _both(first: Callable, second: Callable | None) -> Callable:
    """Both held-out changes at once (a fix that changes the loss, and the measure)."""
    return first if second is None else (lambda: Changes(first(), second()))


def _place(finding: Finding) -> str:
    """The shortest name of where a finding is: its module, else its line, else its op."""
    if finding.module:
        return finding.module
    if finding.source is not None:
        return f"{os.path.basename(finding.source.file)}:{finding.source.line}"
    return finding.op or "model"
