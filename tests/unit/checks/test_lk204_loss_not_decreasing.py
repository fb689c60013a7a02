"""LK204 loss-not-decreasing on hand-built stats: stats that must trigger it and stats that a
naive rule would misread but that must not (ruff-style fixtures, no training run).
tests/unit/checks/test_loss_judgement.py has more (whose loss, moving targets)."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import optimizer, param, series, stats
from tests.check_cases import cause, fires, quiet


# -- LK204 loss-not-decreasing -------------------------------------------------------------
FLAT = [3.30 - 0.0004 * i for i in range(40)]


def _flat(**fields):
    return stats(steps=40, series=series(losses=FLAT), optimizers=(optimizer(),), **fields)


def test_lk204_a_flat_loss_with_dead_units_to_explain_it_is_a_warning_at_the_cause():
    dead = cause("LK102", Severity.WARNING, module="fc1", op="relu", line=20)
    finding = fires("LK204", _flat(params=(param(loss_change_bound=1e-2),)), causes=(dead,))
    assert (finding.severity, finding.module, finding.op, finding.source.line, finding.step) == \
        (Severity.WARNING, "fc1", "relu", 20, 39)
    assert "over 40 steps: 0.4% lower, short of the 1% drop that counts as learning." in finding.message
    assert "Likely cause: LK102 dead-units at fc1 · relu (train.py:20)." in finding.message
    assert finding.evidence["explained_by"] == ["LK102"] and finding.fix == "fix for LK102"


def test_lk204_steps_too_small_to_move_the_loss_are_stuck():
    finding = fires("LK204", _flat(params=(param(loss_change_bound=2e-8),)))
    assert finding.severity is Severity.WARNING and finding.module == "fc"
    assert "Σ ||g||·||Δw|| = 2.0e-08" in finding.message


def test_lk204_a_flat_loss_without_evidence_is_info_and_a_falling_one_quiet():
    (finding,) = quiet("LK204", _flat(params=(param(loss_change_bound=1e-2),)), below=Severity.WARNING)
    assert finding.severity is Severity.INFO and "learning rate" not in finding.fix
    falling = stats(steps=40, series=series(losses=[1.0 - 0.02 * i for i in range(40)]), optimizers=(optimizer(),))
    quiet("LK204", falling, causes=(cause("LK102"),))
    # 15% higher at the end is rising (LK205's business), not flat
    rising = stats(steps=40, series=series(losses=[1.0 + 0.005 * i for i in range(40)]), optimizers=(optimizer(),))
    quiet("LK204", rising, causes=(cause("LK102"),))
