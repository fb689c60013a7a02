"""The loss curves that LK204 and LK205 judge: one per objective, its start and end levels.

A loss series belongs to the optimizer whose step it feeds: each step's loss is the sum of
the losses backward() was called on since the previous step, and the step applies the
gradient of that sum. A GAN's discriminator and generator losses are two series, never
one interleaved curve. Three kinds of objective are judged differently:

- a plain objective: the whole series, start against end (the means of the first and
  last tenth, so minibatch noise averages out);
- competing objectives (adversarial training, actor and critic): one optimizer's loss
  sends gradient into the parameters that another optimizer trains on a loss of its own.
  Each player's loss may rise while the other's falls, so only an overflow is judged;
- a moving target: weights outside every optimizer change during training (a DQN target
  network synced from the trained one, an EMA teacher), so the loss is measured against a
  target that moves. After each sync, and after the learning rate jumps up (a warm
  restart), the loss is expected to jump: the curve is judged within the periods between
  those resets. When they come every few steps (a soft update every step) no period is
  long enough, and only an overflow is judged.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Callable

from leaky.checks._optim import lr_cause
from leaky.checks._util import line_of
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.stats import AuditStats, ParamStats


@dataclass(frozen=True)
class Objective:
    """The loss series of one optimizer (None: a run without an optimizer step)."""

    optimizer: int | None
    rows: tuple[tuple[int, float], ...]     # (step, loss)
    competing: tuple[int, ...] = ()         # optimizers it plays against
    resets: tuple[int, ...] = ()            # steps after which the target or the lr jumped
    moving_target: bool = False             # weights outside every optimizer changed in training
    lrs: tuple[float | None, ...] = ()      # the learning rate at each row (first param group)
    terms: tuple[int | None, ...] = ()      # how many terms each row's loss summed (SeriesRow.terms)

    def per_term(self) -> tuple[tuple[tuple[int, float], ...], int, int] | None:
        """(the rows divided by their number of terms, the fewest, the most) when every row's
        loss is a sum whose number of terms varies from step to step (an episode per step):
        a long episode's loss is larger for its length alone, so only the loss per term is
        one quantity from step to step. None otherwise."""
        if len(self.terms) != len(self.rows) or not self.terms or None in self.terms:
            return None
        fewest, most = min(self.terms), max(self.terms)
        if fewest == most or fewest <= 0:
            return None
        return tuple((step, loss / n) for (step, loss), n in zip(self.rows, self.terms)), fewest, most

    def warming_up(self, config: AuditConfig) -> tuple[float, float] | None:
        """(first, last) learning rate when it rose `lr_jump` (2×) or more over the rows: a warmup."""
        known = [lr for lr in self.lrs if lr]
        if len(known) >= 2 and known[-1] >= config.lr_jump * known[0]:
            return known[0], known[-1]
        return None

    def periods(self) -> list[list[tuple[int, float]]]:
        """The series cut at each reset (one period when there is none)."""
        periods, current, bounds = [], [], iter(sorted(set(self.resets)) + [math.inf])
        bound = next(bounds)
        for step, loss in self.rows:
            while step >= bound:
                if current:
                    periods.append(current)
                current, bound = [], next(bounds)
            current.append((step, loss))
        if current:
            periods.append(current)
        return periods

    def period_drop(self, config: AuditConfig) -> float | None:
        """The median relative drop of the loss within the periods between resets, from the
        first third of a period to its last (None: fewer than `loss_min_periods` to judge)."""
        drops = []
        for period in self.periods():
            losses = [loss for _, loss in period if math.isfinite(loss)]
            third = len(losses) // 3
            if third < 2:
                continue
            start, end = statistics.mean(losses[:third]), statistics.mean(losses[-third:])
            if start != 0:
                drops.append((start - end) / abs(start))
        return statistics.median(drops) if len(drops) >= config.loss_min_periods else None

    def resets_too_frequent(self, config: AuditConfig) -> bool:
        """Resets every few steps (a soft target update each step): no period to judge."""
        return not judged_within_periods(self.resets, config)


def judged_within_periods(resets, config: AuditConfig) -> bool:
    """Whether a loss is judged within the periods between these resets (target syncs, lr
    restarts): the median gap between them is at least `loss_min_period` steps. LK204, LK205
    and its note (checks/loss_not_decreasing.py) all decide it here."""
    cuts = sorted(set(resets))
    gaps = [b - a for a, b in zip(cuts, cuts[1:])]
    return bool(gaps) and statistics.median(gaps) >= config.loss_min_period


@dataclass(frozen=True)
class LossCurve:
    steps: int
    start: float        # mean of the first tenth (>= 3 steps)
    end: float          # mean of the last tenth
    first_step: int
    last_step: int
    nonfinite_step: int | None


def objectives(stats: AuditStats, config: AuditConfig) -> list[Objective]:
    """One objective per optimizer that stepped on losses of its own, in optimizer order."""
    by_optimizer: dict[int | None, list[tuple[int, float]]] = {}
    lrs: dict[int | None, list[float | None]] = {}
    terms: dict[int | None, list[int | None]] = {}
    for row in stats.series:
        if row.loss is not None:
            by_optimizer.setdefault(row.optimizer, []).append((row.step, row.loss))
            lrs.setdefault(row.optimizer, []).append(row.lr)
            terms.setdefault(row.optimizer, []).append(row.terms)
    own = set(by_optimizer)
    result = []
    for index, rows in by_optimizer.items():
        rivals = tuple(sorted(j for i, j in stats.coupled_optimizers if i == index and j in own and j != index)
                       + sorted(i for i, j in stats.coupled_optimizers if j == index and i in own and i != index))
        resets = tuple(sorted(set(stats.target_syncs) | set(_lr_restarts(stats, index, config))))
        result.append(Objective(index, tuple(rows), tuple(dict.fromkeys(rivals)), resets, bool(stats.target_syncs),
                                tuple(lrs[index]), tuple(terms[index])))
    return sorted(result, key=lambda o: -1 if o.optimizer is None else o.optimizer)


def each_objective(stats: AuditStats, config: AuditConfig,
                   judge: Callable[[Objective], Finding | None]) -> list[Finding]:
    """The findings of `judge` over every objective of the run."""
    return [finding for objective in objectives(stats, config) if (finding := judge(objective)) is not None]


def _lr_restarts(stats: AuditStats, index: int | None, config: AuditConfig) -> list[int]:
    rows = [row for row in stats.series if row.optimizer == index and row.lr]
    return [b.step for a, b in zip(rows, rows[1:]) if b.lr > config.lr_jump * a.lr]


def curve_of(rows, min_steps: int) -> LossCurve | None:
    rows = list(rows)
    bad = next((step for step, loss in rows if not math.isfinite(loss)), None)
    finite = [(step, loss) for step, loss in rows if math.isfinite(loss)]
    if len(finite) < min_steps and bad is None:
        return None
    if len(finite) < 6:
        return LossCurve(len(rows), math.nan, math.nan, rows[0][0] if rows else 0,
                         rows[-1][0] if rows else 0, bad)
    tenth = max(3, len(finite) // 10)
    start = sum(loss for _, loss in finite[:tenth]) / tenth
    end = sum(loss for _, loss in finite[-tenth:]) / tenth
    return LossCurve(len(rows), start, end, finite[0][0], finite[-1][0], bad)


def too_few_losses(stats: AuditStats, index: int | None, config: AuditConfig) -> str:
    """Why the verdict is provisional, when this optimizer's own loss series is still too short
    (fewer than `loss_min_steps`) to tell whether the loss falls: a watch's pass early in the
    run, which must not announce a warning that the losses still to come would withdraw."""
    objective = next((o for o in objectives(stats, config) if o.optimizer == index), None)
    if objective is None or len(objective.rows) >= config.loss_min_steps:
        return ""
    return (f"whether the loss falls is judged on {config.loss_min_steps} or more losses; "
            f"{len(objective.rows)} seen so far")


def whose(stats: AuditStats, objective: Objective) -> str:
    """'' for a run with one objective; else the optimizer it belongs to, in words."""
    if objective.optimizer is None or len({row.optimizer for row in stats.series if row.loss is not None}) < 2:
        return ""
    if objective.optimizer >= len(stats.optimizers):
        return f" of optimizer {objective.optimizer}"
    optimizer = stats.optimizers[objective.optimizer]
    built = f", built at {line_of(optimizer.source)}" if optimizer.source else ""
    return f" of optimizer {objective.optimizer} ({optimizer.kind}{built})"


def causes(findings: list[Finding], codes: tuple[str, ...], update_direction: str | None,
           recurrence_direction: str | None = None) -> list[Finding]:
    """The findings among `codes` that can explain the loss, most severe first, then in the
    order of `codes` (root causes before their consequences). An update-ratio finding counts
    only in the given direction (None: either): a too-high rate explains a rising loss, a
    too-low one a flat loss, and either a loss that hovers. A recurrence (LK105) likewise:
    one that "grows" explains a diverging loss, one that "shrinks" a flat one."""
    def fits(f: Finding) -> bool:
        # NOTE: an info finding (a quarter of a layer's units silent, say) is normal in healthy
        # models: it explains nothing.
        return (f.code in codes and f.severity is not Severity.INFO
                and (f.code != "LK202" or update_direction is None or f.evidence.get("direction") == update_direction)
                and (f.code != "LK105" or recurrence_direction is None
                     or f.evidence.get("direction") == recurrence_direction))
    return sorted((f for f in findings if fits(f)), key=lambda f: (-f.severity.rank, codes.index(f.code)))


def cause_text(found: list[Finding]) -> str:
    if not found:
        return ""
    parts = [f"{f.code} {f.name} at {f.where}" for f in found[:3]]
    return " Likely cause: " + "; ".join(parts) + "."


def weights_of(stats: AuditStats, objective: Objective) -> list[ParamStats]:
    return [p for p in stats.params if p.loss_change_bound is not None
            and (objective.optimizer is None or p.optimizer == objective.optimizer)]


def change_bound(stats: AuditStats, objective: Objective) -> float | None:
    """Σ over the optimizer's parameters of the median ||g||·||Δw||: at first order, the most
    one step can change the loss (|ΔL| <= Σ ||g_p|| ||Δw_p||, by Cauchy-Schwarz)."""
    bounds = [p.loss_change_bound for p in weights_of(stats, objective)]
    return sum(bounds) if bounds else None


def with_cause(finding: Finding | None, stats: AuditStats, objective: Objective, found: list[Finding],
               direction: str, config: AuditConfig) -> Finding | None:
    """The loss finding with the line to change: the cause of the finding that explains it
    when it has one, else the learning rate of its optimizer, which the advice is about:
    when no other leak explains it, or, for a rising loss, when those that do name no line
    (a gradient that overflowed, a NaN at the loss: what their advice lowers is the rate)."""
    if finding is None or finding.cause is not None:
        return finding
    cause = next((f.cause for f in found if f.cause is not None), None) if found else None
    if cause is None and (not found or direction == "high"):
        param = next((p for p in stats.params if p.in_optimizer and p.optimizer == objective.optimizer), None)
        cause = None if param is None else lr_cause(stats, param, direction, config)
    return replace(finding, cause=cause) if cause is not None else finding
