"""`leaky probe`: the active checks, each a short re-run of the program from the same start.

    result = run_probes(program, ProbeConfig(steps=200))

The runs, all re-runs as `leaky fix` makes them (`leaky/rerun/trial.py`: the same seeds, the
same initial state, the user's files untouched, K training steps then H held-out steps):

1. the program as it is, K + H steps: the real inputs' score (LK309), where the first
   model call loses its input's information, if it does (`replay.InputTrace`), and which
   of the first step's targets were computed from a model (`origins.TargetOrigins`);
2. the same run again: if its losses differ from the first by a single bit, the program
   cannot be re-run from the same state and no probe is judged ("could not run");
3. LK308 cannot-overfit: K steps on the first batch only (`replay.FirstBatchReplay`): the
   loss curve, its floor, and what is left of it;
4. `repeats` real-input runs with shifted seeds: the noise, measured as `leaky fix` does;
5. LK309 input-ignored: the K + H steps with every model input replaced by zeros
   (`replay.ZeroInputs`), its score against the real inputs' beyond that noise.

What the audit finds is read from run 1 alone, the program as it is (`_notes`): it is the
evidence and the place of a failing probe. The other runs change the program, and their
audits' findings are the probe's doing, never the user's.

A probe that cannot be judged honestly (no optimizer step, a batch that cannot be
replayed, a run that failed) says "could not run" and why; it never passes or fails.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from leaky.checks import CHECKS, cannot_overfit, input_ignored
from leaky.finding import Finding
from leaky.probe.config import ProbeConfig
from leaky.probe.origins import TargetOrigins
from leaky.probe.pairing import RowTrace
from leaky.probe.replay import FirstBatchReplay, InputTrace, ZeroInputs
from leaky.probe.stats import AuditNote, ZeroedInputStats, OverfitStats
from leaky.rerun import verdict
from leaky.rerun.trial import Changes, Trial, run_trial, same_losses

SCHEMA = "leaky/probe-v1"
PASS, FAIL, NOT_RUN = "pass", "fail", "could not run"


@dataclass
class ProbeOutcome:
    code: str
    verdict: str                        # pass | fail | could not run
    reason: str                         # one line: what decided it
    measured: dict = field(default_factory=dict)
    finding: Finding | None = None      # the LK308/LK309 finding, when it fails
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return CHECKS[self.code].name

    def to_dict(self) -> dict:
        return {"code": self.code, "name": self.name, "verdict": self.verdict, "reason": self.reason,
                "measured": _json_safe(self.measured), "finding": None if self.finding is None else self.finding.to_dict(),
                "seconds": self.seconds}


@dataclass
class ProbeResult:
    program: str
    config: ProbeConfig
    baseline: Trial
    reproducible: bool | None = None
    difference: str | None = None
    noise: verdict.Noise | None = None
    probes: list[ProbeOutcome] = field(default_factory=list)
    runs: list[Trial] = field(default_factory=list)
    seconds: float = 0.0
    audit: tuple[AuditNote, ...] = ()   # the audit's findings on the program as it is (_notes)

    @property
    def findings(self) -> list[Finding]:
        return [p.finding for p in self.probes if p.finding is not None]

    def to_dict(self) -> dict:
        c = self.config
        return {
            "schema": SCHEMA,
            "program": self.program,
            "config": {"steps": c.steps, "holdout": c.holdout, "repeats": c.repeats, "audit_steps": c.audit_steps,
                       "overfit_fraction": c.overfit_fraction},
            "reproducible": self.reproducible,
            "difference": self.difference,
            "noise": None if self.noise is None else self.noise.to_dict(),
            "probes": [p.to_dict() for p in self.probes],
            "findings": [f.to_dict() for f in self.findings],
            "audit": [a.to_dict() for a in self.audit],
            "runs": [_json_safe(_run_dict(t)) for t in self.runs],
            "seconds": self.seconds,
        }


def _json_safe(value):
    """Non-finite numbers as the strings "nan", "inf", "-inf" (as in leaky/report-v1)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _run_dict(trial: Trial) -> dict:
    return {"run": trial.fix or "real inputs", "seed_offset": trial.offset, "status": trial.status,
            "steps": trial.steps, "held_out_steps": len(trial.holdout), "score": trial.score,
            "error": trial.error, "applied": trial.applied, "seconds": trial.seconds}


def run_probes(program: Callable[[], None], config: ProbeConfig = ProbeConfig(), name: str = "program",
               progress: Callable[[str], None] | None = None,
               on_step: Callable[[int, int], None] | None = None) -> ProbeResult:
    """`progress(text)` is told when each run starts, `on_step(done, total)` after each of its steps."""
    say = progress or (lambda text: None)
    start = time.perf_counter()

    def trial(part=None, offset=0, label=None, holdout=config.holdout, audit_steps=config.audit_steps) -> Trial:
        parts = part if isinstance(part, tuple) else (part,)
        make = (lambda: Changes(*parts)) if part is not None else None
        run = run_trial(program, make, offset, config.steps, holdout, audit_steps, label, None, on_step)
        result.runs.append(run)
        return run

    say(f"real inputs: {config.steps} steps + {config.holdout} held out")
    trace, rows, origins = InputTrace(), RowTrace(), TargetOrigins()
    result = ProbeResult(name, config, None)   # type: ignore[arg-type]
    result.baseline = base = trial((trace, rows, origins))
    result.audit = _notes(base)
    blocked = _blocked(base)
    if blocked is None:
        say("the same run again, to check it can be re-run from the same state")
        again = trial(InputTrace())
        result.reproducible, result.difference = same_losses(base, again)
        if not result.reproducible:
            blocked = (f"the program cannot be re-run from the same state: two runs with the same seeds differed "
                       f"({result.difference}); it may read live data, the clock or an unseeded source")
    if blocked is not None:
        result.probes = [ProbeOutcome("LK308", NOT_RUN, blocked), ProbeOutcome("LK309", NOT_RUN, blocked)]
        result.seconds = time.perf_counter() - start
        return result
    say(f"cannot-overfit: the first batch only, {config.steps} steps")
    result.probes.append(_overfit(trial, config, result.audit))
    result.probes.append(_input(trial, base, (trace, rows, origins), result, config, say))
    result.seconds = time.perf_counter() - start
    return result


def probe_overfit(program: Callable[[], None], config: ProbeConfig = ProbeConfig(),
                  audit: tuple[AuditNote, ...] = ()) -> ProbeOutcome:
    """LK308 alone: the one run on the first batch (no reproducibility check: the caller's;
    `audit`: the findings of the program as it is, the caller's too)."""
    def trial(part=None, offset=0, label=None, holdout=config.holdout, audit_steps=config.audit_steps) -> Trial:
        return run_trial(program, lambda: Changes(part), offset, config.steps, holdout, audit_steps, label)
    return _overfit(trial, config, audit)


def _blocked(base: Trial) -> str | None:
    if base.steps:
        return None
    if base.failure is not None:
        return f"the program {base.failure.said()} before its first optimizer step"
    return "no optimizer step was observed (the probes need the program's own optimizer)"


def _notes(trial: Trial) -> tuple[AuditNote, ...]:
    """The audit's findings on the program as it is (the real-input run: its first
    `audit_steps` steps, the checks of `leaky audit`), one per code, module and line.

    NOTE: only this run's. The probe runs change the program (one batch repeated, zeroed
    inputs), and what their audits find is the probe's doing: dead units on zero inputs, a
    stale or slow parameter once one batch is memorised. They are never shown as findings."""
    findings = trial.report.findings if trial.report is not None else []
    notes: dict[tuple, AuditNote] = {}
    for f in findings:
        source = (f.source.file, f.source.line) if f.source else None
        notes.setdefault((f.code, f.module, source), AuditNote(f.code, f.name, f.severity.value, f.where, f.module,
                                                               source, f.message, f.fix))
    return tuple(notes.values())


# -- LK308 -----------------------------------------------------------------------------
def _overfit(trial, config: ProbeConfig, audit: tuple[AuditNote, ...]) -> ProbeOutcome:
    replay = FirstBatchReplay()
    audited = config.audit_steps if config.overfit_audit_steps is None else config.overfit_audit_steps
    run = trial(replay, label="the first batch only", holdout=0, audit_steps=audited)
    reason = _replay_blocked(run, replay, config)
    measured = {"losses": run.losses, "recorded": replay.recorded, "replayed": replay.replayed}
    if reason is not None:
        return ProbeOutcome("LK308", NOT_RUN, reason, measured, seconds=run.seconds)
    floors, floor_what, known = _floors(replay, run.losses, config.overfit_tail)
    floor = floors[-1]
    stats = OverfitStats(tuple(run.losses), config.steps, floor, floor_what, config.overfit_tail, audit,
                         run.backward_site, replay.recorded, tuple(floors) if len(set(floors)) > 1 else (), known,
                         replay.terms.tied(run.losses[-1]) if known else None, tuple(run.lrs))
    measured.update({"first_loss": stats.first, "last_loss": stats.last, "loss_floor": floor, "floor_what": floor_what,
                     "floor_known": known, "first_floor": stats.first_floor,
                     "remaining": stats.remaining, "max_remaining": config.overfit_fraction,
                     "audit": [a.to_dict() for a in stats.audit]})
    reason = _not_judged(stats, config, measured)
    if reason is not None:
        return ProbeOutcome("LK308", NOT_RUN, reason, measured, seconds=run.seconds)
    left = f"{100 * stats.remaining:.3g}% of the reducible loss left after {len(stats.losses)} steps"
    found = CHECKS["LK308"].run(stats, config)
    if found:
        return ProbeOutcome("LK308", FAIL, f"{left} (at most {100 * config.overfit_fraction:g}% passes)", measured,
                            found[0], run.seconds)
    return ProbeOutcome("LK308", PASS, left, measured, seconds=run.seconds)


def _not_judged(stats: OverfitStats, config: ProbeConfig, measured: dict) -> str | None:
    """Why the loss curve of the repeated batch cannot be judged, or None (`measured` gets
    what decided it)."""
    below = min((v for v in stats.losses if math.isfinite(v)), default=0.0)
    if not stats.floor_known and below < 0:
        return (f"the loss goes below 0 (to {below:.4g}) on the first batch: it is not made of losses whose floor "
                "leaky knows (a policy-gradient term or an entropy bonus has none), so what is left of it cannot be "
                "measured")
    if stats.remaining is None:
        return (f"the first loss ({stats.first!r}) is not finite or is already at its floor ({stats.floor:g}): there "
                "is nothing to reduce")
    pace = stats.steps_to(config.overfit_fraction)
    measured["steps_to_threshold"] = pace
    why = cannot_overfit.undecided(stats, config)
    if why is not None:
        measured.update({"steady_pace": stats.steady_pace, "tied": stats.tied, "remaining_tied": stats.remaining_tied})
        return f"not decided: {why}"
    if stats.remaining > config.overfit_fraction and pace is not None and pace < config.overfit_still_falling:
        steps = len(stats.losses)
        return (f"not decided in {steps} steps: {100 * stats.remaining:.3g}% of the reducible loss left after {steps} "
                f"steps, but still falling (at the pace of the last {steps // 4} steps it would reach "
                f"{100 * config.overfit_fraction:g}% in {pace * steps:.0f} more); run with a larger --steps")
    return None


def _replay_blocked(run: Trial, replay: FirstBatchReplay, config: ProbeConfig) -> str | None:
    if run.status in ("failed", "exited"):
        return f"on the first batch only, the program {run.failure.said() if run.failure else 'failed'}"
    if replay.keyword_inputs:
        return "the model takes its batch as keyword arguments, which leaky cannot replay"
    if not replay.inputs:
        return "no batch recognised: in its first step the program fed no tensor to a model (a module with parameters)"
    if replay.unmatched:
        return (f"the first batch cannot be replayed alone: a later step fed a tensor the first did not "
                f"({replay.unmatched[0]})")
    if config.steps < config.overfit_min_steps:
        return f"{config.steps} steps cannot tell a slow start from a stall: use --steps {config.overfit_min_steps} or more"
    if run.steps < config.steps:
        return (f"the program made only {run.steps} optimizer steps ({config.steps} needed): give it a larger "
                "step budget, or a smaller --steps")
    if not all(math.isfinite(v) for v in run.losses[:1]):
        return f"the first loss is not finite ({run.losses[0]!r})"
    return None


def _floors(replay: FirstBatchReplay, losses: list[float], tail: int) -> tuple[list[float], str, bool]:
    """The floor of the mean loss of the `tail` steps ending at each step, what it is, and
    whether it is known: from the weighted loss calls the loss is made of (`floor.LossTerms`);
    else that of the one known loss whose value is the first step's loss; else 0, unknown."""
    known = replay.terms.floors(losses, tail)
    if known is not None:
        return (*known, True)
    matching = [(name, floor) for name, floor, value in replay.terms.first()
                if floor is not None and math.isclose(value, losses[0], rel_tol=1e-6, abs_tol=1e-9)]
    if len(matching) == 1:
        name, floor = matching[0]
        what = f"{name}: an exact fit scores 0" if floor == 0 else f"{name}: the entropy of its soft targets"
        return [floor] * len(losses), what, True
    return [0.0] * len(losses), "0, taken for a loss whose floor leaky does not know", False


# -- LK309 -----------------------------------------------------------------------------
def _input(trial, base: Trial, traces: tuple[InputTrace, RowTrace, TargetOrigins], result: ProbeResult,
           config: ProbeConfig, say) -> ProbeOutcome:
    trace, rows, origins = traces
    scores = [base.score]
    for offset in range(1, config.repeats + 1):
        say(f"real inputs with seeds shifted by {offset} (noise)")
        scores.append(trial(offset=offset, label=f"real inputs, seeds +{offset}").score)
    result.noise = verdict.noise(scores)
    say("input-ignored: every model input replaced by zeros")
    zeros = ZeroInputs()
    run = trial(zeros, label="inputs replaced by zeros")
    measured = {"real_loss": base.score, "zeroed_loss": run.score, "margin": result.noise.margin,
                "held_out": base.held_out, "zeroed": sorted(zeros.kinds)}
    if run.status in ("failed", "exited") and run.failure is not None:
        return ProbeOutcome("LK309", NOT_RUN, f"with zeroed inputs the program {run.failure.said()}", measured,
                            seconds=run.seconds)
    if not zeros.zeroed:
        return ProbeOutcome("LK309", NOT_RUN, "no model input to zero: no module with parameters was given a "
                            "floating-point or integer tensor", measured, seconds=run.seconds)
    if not zeros.trained:
        return ProbeOutcome("LK309", NOT_RUN, f"the zeroed inputs trained nothing: {zeros.applied[0]}, but no "
                            "backward pass reached that call's output (a model trained as model.forward(x), not "
                            "model(x), is no call leaky sees)", measured, seconds=run.seconds)
    if base.score is None or run.score is None or not math.isfinite(base.score):
        return ProbeOutcome("LK309", NOT_RUN, f"the real inputs' loss is {base.score!r}: nothing to compare",
                            measured, seconds=run.seconds)
    stats = ZeroedInputStats(base.score, run.score, result.noise.margin, tuple(result.noise.scores), base.held_out,
                       tuple(sorted(zeros.kinds)), trace.lost, trace.reached, trace.forward, result.audit,
                       rows.mispaired(), origins.found, tuple(base.losses))
    measured.update({"gain": stats.gain, "lost_at": trace.lost, "input_reaches_output": trace.reached,
                     "mispaired": stats.mispaired, "targets_from_model": stats.targets_from_model,
                     "real_start": stats.start, "real_fallen": stats.fallen, "real_still_falling": stats.still_falling})
    found = CHECKS["LK309"].run(stats, config)
    scored = "held-out" if base.held_out else "last training"
    compared = f"{scored} loss {base.score:.4g} real vs {run.score:.4g} zeroed, noise {result.noise.margin:.3g}"
    worse = base.score > run.score + result.noise.margin
    # NOTE: real inputs that do worse are "used, not learned yet" below, unless the targets
    # came from a model (then the losses are not comparable at all)
    why = input_ignored.undecided(stats, config) if not found and (not worse or stats.targets_from_model is not None) \
        and base.score >= run.score - result.noise.margin else None
    if why is not None:
        return ProbeOutcome("LK309", NOT_RUN, f"not decided: the real inputs do {'worse' if worse else 'no better'} "
                            f"({compared}), but {why}", measured, seconds=run.seconds)
    if not found and worse:
        return ProbeOutcome("LK309", NOT_RUN, f"not decided: the real inputs do worse than zeros ({compared}), yet "
                            f"they reach the output through a path that trains; used, but not learned in "
                            f"{config.steps} steps: run with a larger --steps", measured, seconds=run.seconds)
    if found:
        return ProbeOutcome("LK309", FAIL, f"the real inputs do no better: {compared}", measured, found[0],
                            run.seconds)
    return ProbeOutcome("LK309", PASS, f"the real inputs do better: {compared}", measured, seconds=run.seconds)
