"""Which steps a watch observes in detail: a fixed interval (`--every N`), or as many as an
overhead budget allows (`--overhead 2%`, the default).

Both measure, in the run, what the watch costs against plain training:

- an *unsampled* step runs the cheap monitor only (record/monitor.py). Its wall time, from
  the end of the step before to its own end, is a plain step plus leaky's own time, which the
  recorder times at its entry points (`own`): plain = interval - own;
- a *sampled* step runs the op mode and the node hooks through the whole step, then folds the
  step and (in a watch) runs the checks: its extra is its interval minus a plain step;
- the first step has no step before it (from entering the watch to its end, the script also
  imports, builds its model and loads data), so it is timed from its model's first forward
  call (`started`, the recorder's root-module hook on a sampled step): its one-time probes
  (LK306's batch probe, the first look at each weight) are in its extra. Where no module runs
  (a functional model), its extra is what leaky timed at its end (the fold, the probes, the
  check pass), plus the forward and backward extra of the later sampled steps.

`Budget` then spends the run's allowance, `share` x the plain time so far, like a bucket: a
sampled step is taken when the credit left pays for one at its expected cost, so the spacing
follows what a sampled step costs on this model and this machine, deep or wide, CPU or GPU.
When even the every-step monitor costs more than the budget allows, the monitor does less: it
takes the total gradient norm only every `norm_every` steps (the loss stays every step), and
the run says so. All times come from one clock (`time.perf_counter`, a fake one in the tests).
"""
from __future__ import annotations

import math
import statistics
import time
from collections import deque
from typing import Callable

DEFAULT_EVERY = 100    # a fixed interval where a budget cannot plan (several ranks)
DEFAULT_SHARE = 0.02   # --overhead 2%: the share of the plain training time a watch may add
# NOTE: the plan (medians of a window, the credit, the next sampled step) is made every
# PLAN_GAP steps and after each sampled step, not at every step: the per-step work is a clock
# read and two appends (< 1 µs), which a 0.6 ms step can afford within 2% and a plan (~5 µs
# over WINDOW values) could not.
PLAN_GAP = 16
WINDOW = 64        # the latest unsampled steps whose median estimates a plain step
NORM_MOST = 64     # with the norm on a schedule: taken at least once every NORM_MOST steps
# NOTE: with the budget over, the monitor's norm is scheduled so that the monitor's own time
# stays within MONITOR_SHARE of the budget, leaving the rest for sampled steps.
MONITOR_SHARE = 0.5


ROUND_MOST = 8   # a sampled round's steps at most (Schedule.round_steps)


class Schedule:
    """Measures steps, and says which step is sampled and when the monitor takes the norm."""

    kind = "every"

    def __init__(self, every: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.every = every
        self.clock = clock
        self.norm_every = 1
        self._last: float | None = None     # the clock at the last step's end
        self._start: float | None = None    # the clock at the first step's first model call
        self._own = 0.0                      # leaky's own time in the step under way
        self._own_norm = 0.0                 # ... of it, the monitor's total gradient norm
        self._plain: deque[float] = deque(maxlen=WINDOW)    # unsampled steps: interval - own
        self._owns: deque[float] = deque(maxlen=WINDOW)     # unsampled steps: own, less the norm
        self._norms: deque[float] = deque(maxlen=WINDOW)    # the norm's time, on steps that took it
        self._extras: deque[float] = deque(maxlen=8)        # sampled steps after the first: extra - end work
        self._ends: deque[float] = deque(maxlen=8)          # ... and the work timed at their ends
        self.first_end: float | None = None   # the first step's timed end work (no interval: module doc)
        self._pending: list[tuple[float, float, bool]] = []   # sampled steps measured before a plain one
        self.first_measured: float | None = None   # the first step's extra, timed from its model's call
        self.reason: str | None = None   # why a budget gave way to a fixed interval (several ranks)
        self.steps = 0
        self.sampled = 0
        self.spent_unsampled = 0.0   # leaky's own time on unsampled steps, summed
        self.spent_sampled = 0.0     # sampled steps' measured extra, summed (not the first step's)
        self.plain_sum = 0.0         # unsampled steps' plain time, summed
        self._end_work = 0.0         # the time leaky spent in this step's end (fold, probes, checks)
        self._stepped_at: dict[int, int] = {}   # optimizer index -> the step it last stepped at
        self._gaps: dict[int, int] = {}         # optimizer index -> the steps between its last two

    # -- fed by the recorder -------------------------------------------------------------
    def own(self, seconds: float) -> None:
        """leaky's own time at one of its every-step entry points (backward, optimizer step)."""
        self._own += seconds

    def timed(self, fn: Callable, *args):
        """fn(*args), its time counted as leaky's own (`own`)."""
        start = self.clock()
        try:
            return fn(*args)
        finally:
            self._own += self.clock() - start

    def own_norm(self, seconds: float) -> None:
        """The monitor's total gradient norm took `seconds` (counted in `own` too)."""
        self._own_norm += seconds
        self._norms.append(seconds)

    def end_work(self, seconds: float) -> None:
        """Time leaky spent ending a sampled step (its fold, a probe, a check pass)."""
        self._end_work += seconds

    def optimizer_stepped(self, index: int, step: int) -> None:
        """Optimizer `index` steps at step `step` (one dict write a step)."""
        last = self._stepped_at.get(index)
        if last is not None:
            self._gaps[index] = step - last
        self._stepped_at[index] = step

    def round_steps(self, optimizers: int) -> int:
        """How many consecutive steps a sampled round takes so that each optimizer steps in
        it: one per optimizer when they step in turn (a GAN's discriminator, then its
        generator), more when one steps less often. NOTE: CleanRL's TD3 steps its critic at
        every environment step and its actor at every second (c a c c a c c ...): rounds of
        two were `c c` as often as not, and a watch saw its critic alone. An optimizer that
        steps less often than every ROUND_MOST steps (once an epoch) is not waited for: its
        rounds would be long and mostly the others'. Under `--every N`, at most N."""
        gaps = [gap for gap in self._gaps.values() if gap <= ROUND_MOST] if optimizers > 1 else []
        steps = max(1, optimizers, *gaps)
        return min(steps, self.every) if self.every else steps

    def started(self) -> None:
        """A model's forward began on a sampled step: the first step is timed from here."""
        if self._last is None and self._start is None:
            self._start = self.clock()

    def step_ended(self, step: int, sampled: bool) -> None:
        """The step `step` ended now, observed in detail or not."""
        now = self.clock()
        last = self._last if self._last is not None else self._start
        self._last = now
        self.steps += 1
        if sampled:
            self.sampled += 1
            if last is None:
                self.first_end = self._end_work
            else:
                self._sampled_interval(now - last, first=self.sampled == 1)
        elif last is not None:
            own = self._own
            self._plain.append(now - last - own)
            self._owns.append(own - self._own_norm)
            self.spent_unsampled += own
            self.plain_sum += now - last - own
        self._own = self._own_norm = self._end_work = 0.0

    def _sampled_interval(self, interval: float, first: bool) -> None:
        plain = self.plain_step()
        if plain is None:
            self._pending.append((interval, self._end_work, first))   # before any plain step: reckoned later
            return
        # NOTE: what leaky timed at the step's end (the fold, the probes, a check pass) is a
        # floor under the step's extra: a plain-step median that noise lifted above this step's
        # interval would make the first step's one-time probes cost 0 (makemore's GRU under a
        # loaded machine read "the first +0 µs"), and the next sampled step come at once
        extra = max(interval - plain, self._end_work, 0.0)
        self.spent_sampled += extra
        if first:
            self.first_measured = extra   # with its one-time probes: not what the next one will cost
            return
        self._extras.append(max(extra - self._end_work, 0.0))
        self._ends.append(self._end_work)

    def _settle_pending(self) -> None:
        """Sampled steps measured before any unsampled one (a watch's first audited steps):
        their extra is reckoned once a plain step is known."""
        pending = self._pending
        if pending and self.plain_step() is not None:
            self._pending = []
            saved = self._end_work
            for interval, end, first in pending:
                self._end_work = end
                self._sampled_interval(interval, first)
            self._end_work = saved

    # -- asked by the recorder -----------------------------------------------------------
    def sample(self, step: int, round_steps: int = 1) -> bool:
        """Whether step `step` is observed in detail (a round of `round_steps` consecutive
        steps, one per optimizer that steps in turn)."""
        return step % self.every < round_steps

    def new_optimizer(self) -> None:
        """An optimizer stepped for the first time on an unsampled step (a fixed interval
        samples it at its next round anyway)."""

    def norm_due(self, step: int) -> bool:
        return self.norm_every == 1 or step % self.norm_every == 0

    # -- what it measured --------------------------------------------------------------
    def plain_step(self) -> float | None:
        """A plain step's time: the median over the latest unsampled steps (None before one)."""
        return statistics.median(self._plain) if self._plain else None

    def sampled_extra(self) -> float | None:
        """What one more sampled step is expected to cost over a plain step: the median of the
        latest after the first; until one is measured, the first's (with its one-time
        probes: an over-estimate, so the second sampled step comes late rather than early)."""
        if self._extras:
            return statistics.median(self._extras) + statistics.median(self._ends)
        return self.first_measured if self.first_measured is not None else self.first_end

    def first_extra(self) -> float | None:
        """The first step's extra (module doc): timed from its model's first call, or else its
        end work plus the later sampled steps' forward and backward extra; None until known."""
        if self.first_measured is not None:
            return self.first_measured
        if self.first_end is None:
            return None
        return self.first_end + (statistics.median(self._extras) if self._extras else 0.0)

    def _unmeasured_first(self) -> float:
        """The first step's extra where it was not timed from a model call (counted apart)."""
        return 0.0 if self.first_measured is not None else (self.first_extra() or 0.0)

    def monitor_cost(self) -> float | None:
        """The monitor's time per unsampled step, with the norm at its present schedule."""
        if not self._owns:
            return None
        norm = statistics.median(self._norms) if self._norms else 0.0
        return statistics.median(self._owns) + norm / self.norm_every

    def spent(self) -> float:
        return self.spent_unsampled + self.spent_sampled + self._unmeasured_first()

    def plain_total(self) -> float | None:
        """The plain time of the steps so far: the unsampled ones measured, the sampled ones
        counted as plain steps of the median time."""
        plain = self.plain_step()
        if plain is None:
            return None
        return self.plain_sum + plain * self.sampled

    def overhead(self) -> float | None:
        """What the watch added so far, as a share of the plain time (0.02 = 2%)."""
        self._settle_pending()
        total = self.plain_total()
        return None if not total else self.spent() / total

    def summary(self) -> dict:
        """The report's `overhead` section (docs/report-schema.md)."""
        self._settle_pending()
        plain, extra, monitor = self.plain_step(), self.sampled_extra(), self.monitor_cost()
        overhead = self.overhead()
        return {
            "schedule": self.kind,
            "budget": getattr(self, "share", None),
            "every": self.every if self.kind == "every" else None,
            "measured": None if overhead is None else round(overhead, 5),
            "steps": self.steps,
            "sampled_steps": self.sampled,
            "plain_step_ms": _ms(plain),
            # NOTE: the mean differs from the median where the script works between steps (an
            # RL rollout, an evaluation): that time is plain time too, and the budget's share of it
            "plain_mean_ms": _ms(self.plain_total() / self.steps) if self.steps and self.plain_total() else None,
            "monitor_ms": _ms(monitor),
            "sampled_extra_ms": _ms(extra),
            "first_step_extra_ms": _ms(self.first_extra()),
            "norm_every": self.norm_every,
            "reason": self.reason,
        }


class Budget(Schedule):
    """Samples as often as `share` of the plain time pays for (module doc)."""

    kind = "budget"

    def __init__(self, share: float = DEFAULT_SHARE, clock: Callable[[], float] = time.perf_counter,
                 several_ranks: Callable[[], bool] = lambda: False) -> None:
        """`several_ranks`: whether the run has several ranks now (process/distributed.py
        `running`), asked at each plan."""
        if not 0 < share < 1:
            raise ValueError(f"the overhead budget is a share of the training time between 0 and 1, not {share}")
        super().__init__(every=0, clock=clock)
        self.share = share
        # NOTE: the recorder observes step 0 in detail from its entry (the one-time probes, the
        # first look); this plans the steps after it
        self.next_sample: int | None = None
        self._planned_at = 0
        self._round_until: int | None = None
        self._round_seen: set[int] = set()   # the optimizers that stepped in the round under way
        self._last_sampled = 0   # the step that began the last sampled round
        self.every = None
        self.several_ranks = several_ranks

    def new_optimizer(self) -> None:
        """An optimizer stepped for the first time on an unsampled step: the next round is
        sampled whatever the credit. NOTE: a GAN's generator first steps at step 1, after the
        discriminator's sampled step 0; unseen until the budget paid for another round (none,
        in a short run), its parameters read as never receiving a gradient (LK108)."""
        if not self.every:
            self.next_sample = 0

    def optimizer_stepped(self, index: int, step: int) -> None:
        super().optimizer_stepped(index, step)
        self._round_seen.add(index)

    def sample(self, step: int, round_steps: int = 1) -> bool:
        if self.every:
            return super().sample(step, round_steps)
        if self._round_until is not None:
            # NOTE: the rest of a round (several optimizers stepping in turn), and on until each
            # known optimizer has stepped in it: one whose gap is not known yet (its first step
            # was just now) may step next only after the round's planned length
            unseen = len(self._stepped_at) > len(self._round_seen)
            if step < self._round_until or (unseen and step - self._last_sampled < ROUND_MOST):
                return True
            self._round_until = None
            self._plan(step)
        elif step - self._planned_at >= PLAN_GAP:
            self._plan(step)
        if self.next_sample is not None and step >= self.next_sample:
            self._round_until, self.next_sample, self._last_sampled = step + round_steps, None, step
            self._round_seen = set()
            return True
        return False

    def _plan(self, step: int) -> None:
        """Set `next_sample` (None: not affordable yet) and `norm_every` from what was measured."""
        self._planned_at = step
        if self.several_ranks():
            # NOTE: the ranks must sample the same steps (the exchange across them is a
            # collective), and each rank's clock would plan its own: a fixed interval, the same
            # on every rank (they count steps alike), from the first plan after the process
            # group is up. Before it, no step is sampled but step 0.
            self.every, self.kind, self.norm_every = DEFAULT_EVERY, "every", 1
            self.reason = "several ranks must sample the same steps"
            return
        self._settle_pending()
        plain, extra = self.plain_step(), self.sampled_extra()
        if plain is None or extra is None or not self._owns:
            self.next_sample = None   # nothing measured yet: some unsampled steps first
            return
        allowed = self.share * plain   # per step
        self._schedule_norm(allowed)
        credit = self.share * (self.plain_total() or 0.0) - self.spent()
        gain = allowed - self.monitor_cost()
        if gain <= 0:
            # NOTE: a monitor that alone uses the whole budget (its norm already on the
            # longest schedule) leaves no credit for sampled steps: none is taken, and the
            # report says so
            self.next_sample = None
            return
        # the credit must cover the next sampled step before it is taken; and, so that unspent
        # credit (a first step that cost less than feared) does not buy a burst of consecutive
        # sampled steps, they are at least as far apart as the budget pays for one
        paid = 0 if credit >= extra else math.ceil((extra - credit) / gain)
        spaced = math.ceil(extra / gain) - (step - self._last_sampled)
        self.next_sample = step + max(paid, spaced, 0)

    def _schedule_norm(self, allowed: float) -> None:
        """With the monitor over its share of the budget, the norm every k steps instead of
        every step; back to every step when it fits again."""
        norm = statistics.median(self._norms) if self._norms else 0.0
        rest = statistics.median(self._owns)
        room = MONITOR_SHARE * allowed - rest
        if norm <= 0 or rest + norm <= MONITOR_SHARE * allowed:
            self.norm_every = 1
        elif room <= 0:
            self.norm_every = NORM_MOST
        else:
            self.norm_every = min(NORM_MOST, max(1, math.ceil(norm / room)))


class ScheduleHost:
    """A mixin of the Recorder: what record/instruments/ ask of a watch's schedule
    (InstrumentHost). Reads `self.schedule` (None in an audit), `self.monitor`, `self.step`."""

    def norm_wanted(self) -> bool:
        """A watch's unsampled step whose monitor's norm is not due."""
        schedule = self.schedule
        return schedule is not None and schedule.norm_every > 1 and not schedule.norm_due(self.step)

    def offer_norm(self, norm, max_norm: float, params: int) -> None:
        """A norm the script computed (record/monitor.py StepMonitor.offer)."""
        self.monitor.offer(norm, max_norm, params)

    def clock(self) -> float:
        """The schedule's clock (0.0 in an audit, which has none)."""
        return self.schedule.clock() if self.schedule is not None else 0.0

    def own_time(self, seconds: float) -> None:
        """An instrument's time on a watch's every-step path."""
        if self.schedule is not None:
            self.schedule.own(seconds)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 4)
