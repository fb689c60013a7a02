"""The hand-built-stats tests themselves: every registered check has a trigger and a
non-trigger in tests/unit/checks/test_lk*.py, every threshold is an AuditConfig field, and
leaky.testing's builders take keywords only and default to stats that raise nothing."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import leaky.testing as testing
from leaky.checks import CHECKS, run_all
from leaky.config import AuditConfig
from leaky.stats import AuditStats

CHECK_TESTS = Path(__file__).parents[1] / "unit" / "checks"
CHECKS_DIR = Path(testing.__file__).parent / "checks"
BUILDERS = [name for name in testing.__all__ if name not in ("assert_gradient_flow", "Severity")]
# Display-only numbers may stay in a check: how many items a message lists.
DISPLAY = {"_SHOWN"}


def _called_with_codes(helper: str) -> set[str]:
    """The codes passed as the first argument of `helper(...)` in the unit-test files."""
    codes = set()
    for path in sorted(CHECK_TESTS.glob("test_lk*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == helper
                    and node.args and isinstance(node.args[0], ast.Constant)):
                codes.add(node.args[0].value)
    return codes


def test_every_check_has_a_hand_built_trigger_and_non_trigger():
    assert set(CHECKS) <= _called_with_codes("fires"), "no fires(...) for " + str(set(CHECKS) - _called_with_codes("fires"))
    assert set(CHECKS) <= _called_with_codes("quiet"), "no quiet(...) for " + str(set(CHECKS) - _called_with_codes("quiet"))


def _numbers(value: ast.expr) -> bool:
    if isinstance(value, ast.Tuple):
        return bool(value.elts) and all(_numbers(v) for v in value.elts)
    return isinstance(value, ast.Constant) and type(value.value) in (int, float)


def test_no_threshold_is_left_in_a_check_file():
    left = []
    for path in sorted(CHECKS_DIR.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and _numbers(node.value):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                names += [e.id for t in node.targets if isinstance(t, ast.Tuple) for e in t.elts]
                left += [f"{path.name}: {name}" for name in names if name not in DISPLAY]
    assert not left, f"thresholds belong in AuditConfig: {left}"


@pytest.mark.parametrize("name", BUILDERS)
def test_builders_take_keywords_only(name):
    builder = getattr(testing, name)
    kinds = {p.kind for p in inspect.signature(builder).parameters.values()}
    assert kinds <= {inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD}, name
    with pytest.raises(TypeError):
        builder(0)


def test_empty_stats_are_audit_stats_empty():
    assert testing.stats() == AuditStats.empty()
    assert testing.stats(steps=3).steps == 3


def test_the_builders_defaults_raise_nothing():
    t = testing
    everything = t.stats(steps=20, backward_calls=20, used_optimizer=True, ops=(t.op(),),
                         activations=(t.activation(site=1),), params=(t.param(),),
                         recurrences=(t.recurrence(),), nonfinite=(t.nonfinite(),), cuts=(t.cut(),),
                         losses_seen=(t.loss_probe(),), inputs=(t.input_stats(),), weights=(t.weight(),),
                         functions=(t.function(),), series=t.series(losses=[1.0 - 0.02 * i for i in range(20)]),
                         optimizers=(t.optimizer(scheduler=t.scheduler()),), casts=(t.cast(),))
    assert run_all(everything, AuditConfig()) == []


def test_param_fills_its_ratio_summary_from_the_ratios():
    weight = testing.param(name="enc.fc.weight", update_ratios=((0, 1e-3), (1, 3e-3), (2, 2e-3)))
    assert (weight.module, weight.update_ratio, weight.update_ratio_max, weight.graded_update_steps) == \
        ("enc.fc", 2e-3, 3e-3, 3)
    assert (weight.optimizer, weight.group) == (0, 0)
    assert testing.param(in_optimizer=False).optimizer is None


def test_series_numbers_the_steps_and_checks_lengths():
    rows = testing.series(losses=[1.0, 0.5], lr=[1e-3, 2e-3], start=10, every=5, optimizer=1)
    assert [(r.step, r.loss, r.grad_norm, r.lr, r.optimizer) for r in rows] == \
        [(10, 1.0, 1.0, 1e-3, 1), (15, 0.5, 1.0, 2e-3, 1)]
    with pytest.raises(ValueError):
        testing.series(losses=[1.0, 0.5], grad_norms=[1.0])
