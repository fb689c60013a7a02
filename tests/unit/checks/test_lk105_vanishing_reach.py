"""LK105's vanishing side on hand-built stats: how far back a recurrence's gradient reaches,
judged with the loss (the training runs are tests/unit/checks/test_recurrence_reach.py)."""
from __future__ import annotations

from leaky.checks._reach import reach_of
from leaky.finding import Severity
from leaky.testing import op, param, recurrence, series, source, stats
from tests.check_cases import cause, fires, quiet

T = 40
FLAT = [0.69, 0.70, 0.69, 0.68, 0.70] * 4          # at chance (log 2) over 20 steps
FALLING = [0.69 - 0.02 * i for i in range(20)]     # 0.69 -> 0.31


def _geometric(per_step: float, steps: int = T, floor: float = 0.0) -> tuple[float, ...]:
    """Gradient norm per time step (t = 0 first) entering at the last step and shrinking by
    `per_step` each step back; values below `floor` read 0 (float32 underflow of the norm)."""
    values = [per_step ** (steps - 1 - t) for t in range(steps)]
    return tuple(v if v >= floor else 0.0 for v in values)


def _loop(radius: float, profile, losses=None, kind: str = "loop", init_line: int | None = 12):
    rec = recurrence(module="net", param="W_hh", kind=kind, spectral_radius=radius, profile=profile,
                     op=op(op="matmul", module="net", source=source(line=30)),
                     init_source=source(line=init_line) if init_line else None)
    extra = {"series": series(losses=losses)} if losses is not None else {}
    return stats(steps=20, recurrences=(rec,), params=(param(name="net.W_hh", source=source(line=9)),), **extra)


def test_reach_counts_the_steps_back_from_where_the_gradient_enters():
    reach = reach_of(_geometric(0.3, 10, floor=1e-6), 1e-3)
    # 0.3^k >= 1e-3 for k <= 5: steps 4..9 reached; 0.3^k < 1e-6 for k >= 12: none zero here
    assert (reach.entry, reach.first_reached, reach.steps_reached, reach.zero_steps) == (9, 4, 6, 0)
    assert abs(reach.per_step - 0.3) < 1e-9
    reach = reach_of(_geometric(0.3, 20, floor=1e-6), 1e-3)
    assert reach.zero_steps == 8 and reach.first_share == 0.0   # 0.3^12 = 5e-7 < 1e-6: steps 0-7 read 0


def test_lk105_a_contracting_loop_with_a_flat_loss_is_a_warning_with_the_init_line():
    finding = fires("LK105", _loop(0.3, _geometric(0.25, floor=1e-20), FLAT))
    assert (finding.severity, finding.module, finding.source.line) == (Severity.WARNING, "net", 30)
    assert (finding.cause.line, finding.evidence["steps_reached"], finding.evidence["time_steps"]) == (12, 5, 40)
    assert "reaches back only 5 of the 40 time steps" in finding.message
    assert "the loss reads the final state" in finding.message and "exactly 0" in finding.message
    assert "The loss is flat" in finding.message and "before step 35" in finding.message
    assert "nn.init.orthogonal_, at train.py:12" in finding.fix


def test_lk105_without_an_init_call_the_cause_is_where_the_weight_was_created():
    finding = fires("LK105", _loop(0.3, _geometric(0.25), FLAT, init_line=None))
    assert finding.cause.line == 9 and "created" in finding.cause.what


def test_lk105_radius_above_radius_low_still_vanishes_over_a_long_sequence():
    # rho = 0.7: 0.7^39 = 9e-7 <= 1e-3, W alone kills the gradient over 40 steps
    assert fires("LK105", _loop(0.7, _geometric(0.6), FLAT)).severity is Severity.WARNING


def test_lk105_a_falling_loss_makes_the_same_decay_worth_knowing_only():
    finding = fires("LK105", _loop(0.3, _geometric(0.25), FALLING))
    assert finding.severity is Severity.INFO and "the model learns from the steps the gradient reaches" in finding.message


def test_lk105_a_loss_falling_by_a_few_percent_is_no_evidence_of_learning():
    # a random head starts a few percent above chance and settles there
    barely = [0.72 - 0.0015 * i for i in range(20)]
    finding = fires("LK105", _loop(0.3, _geometric(0.25), barely))
    assert finding.severity is Severity.WARNING and "falls only" in finding.message


def test_lk105_decay_that_w_cannot_explain_is_not_called_vanishing():
    # orthogonal W (rho = 1): the decay is the tanh factors' (saturation, LK101), not W's
    quiet("LK105", _loop(1.0, _geometric(0.6), FLAT))
    # rho = 0.9 over 40 steps: 0.9^39 = 0.016 > 1e-3
    quiet("LK105", _loop(0.9, _geometric(0.6), FLAT))
    # a gated cell routes the gradient around W_hh
    quiet("LK105", _loop(0.3, _geometric(0.25), FLAT, kind="gru"))
    # the loss on every step: the gradient enters everywhere and step 0 gets its share
    quiet("LK105", _loop(0.3, tuple(1.0 + 0.01 * t for t in range(T)), FLAT))


def test_lk105_without_a_loss_to_judge_only_a_radius_far_below_one_warns():
    assert fires("LK105", _loop(0.3, _geometric(0.25))).severity is Severity.WARNING
    # rho = 0.7 is not far from nn.RNN's default (~0.58): without the loss, nothing to say
    quiet("LK105", _loop(0.7, _geometric(0.6)))


def test_lk204_names_a_vanishing_recurrence_as_the_cause_of_a_flat_loss():
    lk105 = cause("LK105", module="net", op="matmul", line=30, evidence={"direction": "shrinks"})
    finding = fires("LK204", stats(steps=20, series=series(losses=FLAT)), causes=(lk105,))
    assert finding.severity is Severity.WARNING and finding.evidence["explained_by"] == ["LK105"]
    assert (finding.module, finding.source.line) == ("net", 30)
    # an exploding recurrence explains a diverging loss (LK205), not a flat one
    exploding = cause("LK105", Severity.ERROR, module="net", op="matmul", line=30, evidence={"direction": "grows"})
    assert fires("LK204", stats(steps=20, series=series(losses=FLAT)), causes=(exploding,)).severity is Severity.INFO


def test_lk205_does_not_blame_a_vanishing_recurrence_for_a_diverging_loss():
    rising = [1.0 * 1.1 ** i for i in range(20)]
    vanishing = cause("LK105", module="net", op="matmul", line=30, evidence={"direction": "shrinks"})
    finding = fires("LK205", stats(steps=20, series=series(losses=rising)), causes=(vanishing,))
    assert "LK105" not in finding.evidence.get("explained_by", [])
