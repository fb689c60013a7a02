"""Per-unit statistics of nonlinearities, kept on the device.

The op registry maps the torch function the user called to an `Activation` (leaky/ops):
how to tell a unit-sample is active, and how to tell it sits in a flat region of the
nonlinearity.
Each site keeps a few tensors whose size is the number of units; nothing grows with batch
size or with steps.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import torch
from torch import Tensor

from leaky import ops
from leaky.ops import Activation
from leaky.record.reduce import amax_over, other_dims, sum_over

HIST_BINS = 32
HIST_LOW = -16.0  # log10 of the smallest local derivative share kept apart
# NOTE: whether a ReLU unit fired at all is taken at every observed call (one max per unit:
# a unit that fires once is never called dead). How often it fires, and how many samples
# sit in a flat region, are shares: counting them needs a pass that writes a copy of the
# map (a large share of `watch --every 1`'s cost: docs/performance.md). A watch
# counts them (and the raw input's per-feature mean and spread, record/forward.py, and the
# share of gradient elements an op zeroes, record/gradients.py) at most once every RATE_GAP
# steps, the cadence at which its checks read them; an audit, and a watch's first audited
# steps, count every call.
RATE_GAP = 10
PENDING_LIMIT = 16   # a site's per-call fire counts (or outputs, SHARES_HELD) kept within one step before folding
# NOTE: a sigmoid's or tanh's output is kept until the step ends (or PENDING_LIMIT calls, or
# this many elements of one site), then its local-derivative shares are histogrammed and its
# flat samples counted for all of the step's calls at once: in a recurrence that is ~10 tensor
# calls per site a step, not per time step. Autograd saves these outputs for the backward
# anyway, so keeping them costs memory only between the backward and the step's end.
SHARES_HELD = 1 << 22
# NOTE: the last RAN_KEPT steps at which a site ran are kept (a constant per site): a unit is
# judged dead only over the steps where its layer ran (a layer trained first and then no
# longer run is not silent, only idle), and its window is counted in those steps.
RAN_KEPT = 4096
# NOTE: a ReLU's fire counts (a sign and a sum) cost two tensor calls per call, whose fixed
# cost dwarfs the arithmetic on a small output. An output below HOLD_BELOW
# elements is kept instead (autograd saves a ReLU's output for its backward anyway) and
# counted when the backward starts or the step ends, stacked with every other kept output of
# the same shape, of any site (count_held): a few calls for a deep MLP's fifty ReLUs, the same
# whole-number counts. Larger outputs are counted at the call, where stacking would only add
# a copy.
HOLD_BELOW = 1 << 16
# NOTE: a softmax's rows over its last RECENT_STEPS steps (counted ones): per step the rows
# that can move, the flat ones, and the sum of the rows (the mean row: one-hot when every row
# puts its mass on the same entry, a policy collapsed onto one action). A constant per site.
RECENT_STEPS = 8


def unit_dim(out: Tensor, producer: str | None) -> int:
    """Which dim indexes units: channels for conv feature maps, features otherwise."""
    if out.ndim >= 4:
        return 1
    if out.ndim == 3 and producer and ops.feeds_units(producer):
        return 1
    return out.ndim - 1


@dataclass
class UnitStats:
    """Accumulators for one activation site. Tensors live on the activation's device."""

    activation: Activation
    units: int
    unit_dim: int
    detail: dict = field(default_factory=dict)
    samples: int = 0                      # unit-samples per unit seen so far (host int)
    calls: int = 0                        # ... in this many calls (samples / calls: a call's batch)
    counted: int = 0                      # ... of them in the calls whose rates were counted
    active: Tensor | None = None          # [units] samples with output > 0 (relu family), float64
    last_active: Tensor | None = None     # [units] last step with any output > 0, -1: never (float64)
    flat: Tensor | None = None            # [units] samples in a flat region
    hist: Tensor | None = None            # [HIST_BINS] log10 local-derivative share histogram
    rows: int = 0                         # softmax rows seen
    peaked_rows: Tensor | None = None     # softmax rows whose max probability > detail["peaked_row"]
    # softmax, at the first step this site ran (before training could have shaped it): the rows
    # with room to move (>= 2 nonzero entries), those of them that are flat, and the sum of their
    # Jacobian shares tr(diag(p) - ppᵀ) / (1 - 1/n) (see jacobian_share)
    first_step: int | None = None
    first_rows: Tensor | None = None
    first_flat: Tensor | None = None
    first_share: Tensor | None = None
    # softmax, its last RECENT_STEPS counted steps: [step, rows that can move, flat rows, rows,
    # the rows' sum over the softmax dim (a vector)], the last entry this step's, growing
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_STEPS))
    row_steps: int = 0                    # ... and how many counted steps it has seen in all
    # NOTE: kept only for a softmax on the loss path (an output distribution, told at each sampled
    # backward): attention, the common softmax, is never judged so and pays nothing for it
    on_loss_path: bool = False
    pending: list = field(default_factory=list)   # this step's per-call fire counts, not yet folded
    pending_step: int = -1
    outputs: list = field(default_factory=list)   # this step's outputs (and versions) whose shares are not yet folded
    outputs_step: int = -1
    held: list = field(default_factory=list)      # this step's small outputs (and versions) not yet counted (count_held)
    held_step: int = -1
    ran: deque = field(default_factory=lambda: deque(maxlen=RAN_KEPT))   # the last steps this site ran at
    ran_count: int = 0                    # ... and how many steps it ran at in all

    def update(self, out: Tensor, step: int, count: bool = True) -> None:
        """Fold one call's output; `count`: also count fire rates and flat samples."""
        if not self.ran or self.ran[-1] != step:
            self.ran.append(step)
            self.ran_count += 1
        x = out.detach()
        if self.activation.rows:
            if count:
                self._update_softmax(x)
                if self.on_loss_path:
                    self._update_recent_rows(x, step)
            if self.first_step is None:
                self.first_step = step
            if step == self.first_step:
                self._update_first_rows(x)
            return
        if not x.numel():
            return
        dims = other_dims(x.ndim, self.unit_dim)
        per_unit = x.numel() // max(self.units, 1)
        self.samples += per_unit
        self.calls += 1
        if count:
            self.counted += per_unit
        if self.activation.can_die or self.detail.get("low") == 0.0:
            if count and x.numel() < HOLD_BELOW and not self.activation.bounded:
                self._hold(x, step)
            elif count:
                self._pend(positive_counts(x, dims, per_unit, nonnegative=self.activation.nonnegative), step)
            else:
                any_fired = amax_over(x, dims) > 0   # a NaN in the unit: not fired (a non-finite step)
                self._start(any_fired)
                self.last_active.masked_fill_(any_fired, step)
        if not count:
            return
        if self.activation.bounded:
            self._count_flat(self._bounded_margin(x), dims, per_unit)
        elif self.activation.derivative_share is not None:
            self._keep_output(x, step)

    def _count_flat(self, margin: Tensor, dims: list[int], per_unit: int) -> None:
        counted = count_positive(margin, dims, per_unit)
        self.flat = counted if self.flat is None else self.flat + counted

    def _keep_output(self, x: Tensor, step: int) -> None:
        """Keep one call's output until its shares are folded with the step's other calls
        (see SHARES_HELD); a call of another step, shape, dtype or device folds those first."""
        kept = self.outputs
        if kept:
            first = kept[0][0]
            if (self.outputs_step != step or x.shape != first.shape or x.dtype != first.dtype
                    or x.device != first.device or (len(kept) + 1) * x.numel() > SHARES_HELD):
                self.fold_outputs()
        self.outputs_step = step
        self.outputs.append((x, x._version))
        if len(self.outputs) >= PENDING_LIMIT:
            self.fold_outputs()

    def fold_outputs(self) -> None:
        """Histogram the kept outputs' local-derivative shares and count their flat samples,
        stacked: the same counts, bin for bin and unit for unit, as one call at a time (each
        a whole number, exact in float32 below 2**24 = 4 * SHARES_HELD).

        NOTE: an output written in place after its call has lost its values and is left out
        (for sigmoid and tanh that also breaks the user's backward, which reads the output)."""
        kept, self.outputs = self.outputs, []
        outputs = [x for x, version in kept if x._version == version]
        if not outputs:
            return
        with torch._C.DisableTorchFunction(), torch.no_grad():
            x = outputs[0] if len(outputs) == 1 else torch.stack(outputs)
            dims = other_dims(x.ndim, self.unit_dim + x.ndim - outputs[0].ndim)
            self._count_flat(self._share_margin(x), dims, x.numel() // max(self.units, 1))

    def _hold(self, x: Tensor, step: int) -> None:
        """Keep one call's output until its fire counts are taken with others (count_held)."""
        if self.held and (self.held_step != step or len(self.held) >= PENDING_LIMIT):
            count_held([self])
        self.held_step = step
        self.held.append((x, x._version))

    def _start(self, like: Tensor, counted: bool = False) -> None:
        """The per-unit accumulators, float64, made at the first call that needs them."""
        if self.last_active is None:
            self.last_active = torch.full(like.shape, -1.0, dtype=torch.float64, device=like.device)
        if counted and self.active is None:
            self.active = torch.zeros(like.shape, dtype=torch.float64, device=like.device)

    def _pend(self, fired: Tensor, step: int) -> None:
        """Keep one call's per-unit fire counts until the step ends (settle_units folds every
        site's in a few calls); a pending step other than this one is folded first."""
        if self.pending and self.pending_step != step:
            settle_units([self])
        self.pending_step = step
        self.pending.append(fired)
        if len(self.pending) >= PENDING_LIMIT:   # many calls in one step (a loop over time): bounded
            self.pending = [_summed(self.pending)]

    def _bounded_margin(self, x: Tensor) -> Tensor:
        """Positive exactly where a unit-sample of a bounded activation sits at a bound."""
        low, high = self.detail["low"], self.detail["high"]
        if low == 0.0:  # relu6: the lower bound is ReLU sparsity, counted as inactivity
            return (x >= high).to(x.dtype)
        return ((x <= low) | (x >= high)).to(x.dtype)

    def _share_margin(self, x: Tensor) -> Tensor:
        """Fold the local-derivative shares of x into the histogram; positive exactly where a
        unit-sample sits in a flat region (its share below flat_share)."""
        share = self.activation.derivative_share(x.float())
        hist = log_histogram(torch.log10(share.clamp_min(10.0 ** HIST_LOW)))
        self.hist = hist if self.hist is None else self.hist + hist
        return share.neg_().add_(self.detail["flat_share"])   # flat_share - share > 0: flat

    def _update_softmax(self, x: Tensor) -> None:
        dim = self.detail.get("dim", -1)
        peak = (x.amax(dim=dim) > self.detail["peaked_row"]).sum()
        self.rows += x.numel() // max(x.shape[dim] if x.ndim else 1, 1)   # a 0-d softmax: one row
        self.peaked_rows = peak if self.peaked_rows is None else self.peaked_rows + peak

    def _update_first_rows(self, x: Tensor) -> None:
        share, movable = jacobian_share(x, self.detail.get("dim", -1) if x.ndim else 0)
        flat = ((share < self.detail["flat_share"]) & movable).sum()
        rows, total = movable.sum(), torch.where(movable, share, 0.0).sum()
        if self.first_rows is not None:
            rows, flat, total = rows + self.first_rows, flat + self.first_flat, total + self.first_share
        self.first_rows, self.first_flat, self.first_share = rows, flat, total

    def _update_recent_rows(self, x: Tensor, step: int) -> None:
        """This step's rows (see `recent`): three sums and the rows' sum, on the device."""
        dim = self.detail.get("dim", -1) if x.ndim else 0
        share, movable = jacobian_share(x, dim)
        wide = x.float().reshape(1) if not x.ndim else x.float().movedim(dim, -1)
        flat = ((share < self.detail["flat_share"]) & movable).sum()
        entry = [movable.sum(), flat, wide.numel() // max(wide.shape[-1], 1), wide.reshape(-1, wide.shape[-1]).sum(0)]
        last = self.recent[-1] if self.recent else None
        if last is None or last[0] != step or last[4].shape != entry[3].shape:
            self.recent.append([step, *entry])
            self.row_steps += last is None or last[0] != step
        else:
            last[1:] = [a + b for a, b in zip(last[1:], entry)]

    def host(self) -> dict:
        """Copy the accumulators to the host: called once, at the end."""
        settle_units([self])
        to = lambda t: None if t is None else t.detach().cpu().double().numpy()  # noqa: E731
        return {
            "active": to(self.active), "last_active": to(self.last_active), "flat": to(self.flat),
            "hist": to(self.hist), "peaked_rows": None if self.peaked_rows is None else float(self.peaked_rows),
            "first_rows": scalar(self.first_rows), "first_flat": scalar(self.first_flat),
            "first_share": scalar(self.first_share),
            "recent": [(step, scalar(movable), scalar(flat), rows, to(summed))
                       for step, movable, flat, rows, summed in self.recent],
        }


def settle_units(all_stats) -> None:
    """Fold each site's pending fire counts into its totals and its last step fired.

    NOTE: at the end of a step, for every site at once: four `_foreach` calls in all, not a
    sum, a test and a masked write per call (each a tensor op at every ReLU). The counts are
    whole numbers >= 0, never NaN (positive_counts), summed in float64 (exact to 2**53
    unit-samples); the last step fired is max(last, sign(count) * (step + 1) - 1), which
    is `step` where a unit fired and leaves `last` (>= -1) where it did not."""
    all_stats = list(all_stats)
    count_held(all_stats)
    stats_now, counts = [], []
    for stats in all_stats:
        if stats.outputs:
            stats.fold_outputs()
        if not stats.pending:
            continue
        pending, stats.pending = stats.pending, []
        stats._start(pending[0], counted=True)
        stats_now.append(stats)
        counts.append(pending[0] if len(pending) == 1 else _summed(pending))
    if not stats_now:
        return
    with torch._C.DisableTorchFunction(), torch.no_grad():
        torch._foreach_add_([s.active for s in stats_now], counts)
        fired = torch._foreach_sign(counts)
        steps = {s.pending_step for s in stats_now}
        if len(steps) == 1:
            torch._foreach_mul_(fired, float(steps.pop() + 1))
        else:
            torch._foreach_mul_(fired, [float(s.pending_step + 1) for s in stats_now])
        torch._foreach_sub_(fired, 1.0)
        torch._foreach_maximum_([s.last_active for s in stats_now], fired)


def count_held(all_stats) -> None:
    """Take the fire counts of every kept output (UnitStats._hold) and pend them, each its
    site's own: outputs of one shape, dtype, device and unit dim are stacked, of any site, at
    most SHARES_HELD elements at a time, and counted in one positive_counts (whole numbers,
    so the same counts as one call at a time, unit for unit).

    NOTE: an output written in place since its call has lost its values: it is left out,
    and its unit-samples are taken back out of the counted ones, so the site's fire rates
    stay counts over the samples counted (a ReLU's backward reads its output: such a write
    also breaks the user's backward)."""
    with torch._C.DisableTorchFunction(), torch.no_grad():   # a tensor attribute read, too, enters a mode
        groups: dict = {}
        for stats in all_stats:
            if not stats.held:
                continue
            held, stats.held = stats.held, []
            for x, version in held:
                if x._version != version:
                    stats.counted -= x.numel() // max(stats.units, 1)
                    continue
                key = (x.shape, x.dtype, x.device, stats.unit_dim, stats.activation.nonnegative)
                groups.setdefault(key, []).append((stats, x))
        for (shape, _, _, unit, nonnegative), items in groups.items():
            numel = items[0][1].numel()
            per_unit = numel // max(items[0][0].units, 1)
            dims = [d + 1 for d in other_dims(len(shape), unit)]
            size = max(1, SHARES_HELD // max(numel, 1))
            for start in range(0, len(items), size):
                chunk = items[start:start + size]
                counts = positive_counts(torch.stack([x for _, x in chunk]), dims, per_unit, nonnegative)
                for (stats, _), row in zip(chunk, counts.unbind(0)):
                    stats._pend(row, stats.held_step)


def _summed(counts: list[Tensor]) -> Tensor:
    """Several calls' counts of one site, summed in float64 (each is below 2**24, not their sum)."""
    return torch.stack(counts).sum(0, dtype=torch.float64)


# NOTE: the bins are HIST_BINS equal steps of log10 from HIST_LOW to 0, each closed below and
# the last closed above too; a width of a power of two (here 0.5) makes (x - HIST_LOW) / width
# exact but for the one rounding of the subtraction.
_BIN_SCALE = HIST_BINS / -HIST_LOW
assert _BIN_SCALE == 2.0 ** round(math.log2(_BIN_SCALE)), "log_histogram needs a bin width of a power of two"


def log_histogram(logs: Tensor) -> Tensor:
    """`torch.histc(logs, HIST_BINS, HIST_LOW, 0)` for float32 logs of shares in [0, 1], clamped
    below at 10**HIST_LOW (so every finite value lies in [HIST_LOW, 0]): the same float32 counts,
    bin for bin, NaN left out.

    NOTE: torch's CPU histc is slow per element (most of an audited minGPT step's fold; the
    timings are in docs/performance.md). This is the same float32
    bin arithmetic, trunc((x - low) * bins / (high - low)) with the top edge in the last bin
    (checked against histc, edges and their neighbours included, by tests/e2e/test_properties.py),
    done as four elementwise calls, a cast and one bincount, several times faster. Off the CPU
    histc is one kernel, where this would be seven: there histc itself is called."""
    if logs.device.type != "cpu":
        return torch.histc(logs, bins=HIST_BINS, min=HIST_LOW, max=0.0)
    # clamped to [0, bins - 1] first, the cast to an integer truncates as floor would; a NaN
    # stays NaN through the clamp and is put in bin HIST_BINS, which is dropped. The bins are
    # cast to int32, not int64: half the bytes to write, and bincount counts them the same.
    bins = (logs - HIST_LOW).mul_(_BIN_SCALE).clamp_(0, HIST_BINS - 1).nan_to_num_(float(HIST_BINS))
    return torch.bincount(bins.view(-1).to(torch.int32), minlength=HIST_BINS + 1)[:HIST_BINS].float()


def scalar(t: Tensor | None) -> float | None:
    return None if t is None else float(t)


def jacobian_share(p: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Per row of a softmax output p: tr J / max tr J, J = diag(p) - ppᵀ, and whether it can move.

    J is the softmax's Jacobian: the scores get g_in = J g_out = p * (g_out - <p, g_out>).
    J is positive semidefinite, so each of its eigenvalues, and ||g_in|| / ||g_out||, is at
    most tr J = sum p_i (1 - p_i) = 1 - ||p||², the local derivative summed over the row.
    Over n entries tr J is largest, 1 - 1/n, for the uniform row; for n = 2 the share is
    s(1-s) / (1/4), the sigmoid's. n counts the entries the row can put probability on: a
    masked one (-inf, probability exactly 0) is not a direction the row can move in, and a
    row with one such entry (the first row of a causal mask) has no derivative to lose.
    """
    wide = p.float() if p.dtype in (torch.float16, torch.bfloat16) else p
    if not wide.ndim:
        wide = wide.reshape(1)
    squares = torch.linalg.vector_norm(wide, 2, dim=dim).square()
    n = torch.count_nonzero(wide, dim=dim)
    movable = n > 1
    share = (1.0 - squares).clamp_min(0.0) / (1.0 - 1.0 / n.clamp_min(2))
    return share.nan_to_num(nan=1.0), movable & ~squares.isnan()


_EXACT_FLOAT_SUM = 2 ** 24   # float32 holds every whole number up to this


def count_positive(x: Tensor, dims: list[int], per_unit: int, nonnegative: bool = False) -> Tensor:
    """Per unit (the dims not in `dims`), how many elements of x are > 0, as int64."""
    counts = positive_counts(x, dims, per_unit, nonnegative)
    return counts if counts.dtype == torch.long else counts.long()


def positive_counts(x: Tensor, dims: list[int], per_unit: int, nonnegative: bool = False) -> Tensor:
    """Per unit, how many elements of x are > 0: whole numbers in float32 (int64 from 2**24
    elements per unit), never NaN.

    NOTE: `(x > 0).sum(dims)` makes a bool tensor and sums it through an integer cast,
    several times slower (docs/performance.md) than the signs summed as float32, which are
    exact: every partial sum is a whole number below 2**24.
    torch's sign is (0 < x) - (x < 0), so sign(NaN) = 0 like NaN > 0 (on the CPU checked by
    tests/e2e/test_properties.py, so the sums need no NaN pass there); on other devices the
    sums are cleaned of NaN, so that were sign(NaN) NaN there, the unit holding it would
    count 0 for that step (already a non-finite step).
    """
    if per_unit >= _EXACT_FLOAT_SUM:
        return sum_over(x > 0, dims, dtype=torch.long)
    signs = x.sign()
    if not nonnegative:
        signs.clamp_(min=0)
    counts = sum_over(signs, dims, dtype=torch.float32)
    return counts if x.device.type == "cpu" else counts.nan_to_num_(nan=0.0)


def median_from_hist(hist) -> float | None:
    """Median local-derivative share from the log10 histogram (bin centre)."""
    if hist is None or hist.sum() <= 0:
        return None
    cumulative = hist.cumsum() / hist.sum()
    index = int((cumulative >= 0.5).argmax())
    width = -HIST_LOW / HIST_BINS
    return 10.0 ** (HIST_LOW + (index + 0.5) * width)


__all__ = ["RATE_GAP", "UnitStats", "count_held", "settle_units", "count_positive", "positive_counts", "jacobian_share", "median_from_hist", "unit_dim"]
