"""LK401 replicas-diverged and LK402 gradients-not-synced on hand-built stats: the derived
"replicas" field as derive/fields/replicas.py makes it, with each cause the run can show and the
look-alikes that must stay quiet (no training run: the real runs are tests/e2e/test_replicas.py)."""
from __future__ import annotations

from leaky.checks import run_notes
from leaky.config import AuditConfig
from leaky.finding import Severity
from leaky.testing import stats
from tests.check_cases import fires, quiet

WRAPPER = {"module": "Net", "source": {"file": "train.py", "line": 12}, "built_step": 0, "find_unused": False,
           "init_sync": True, "bypass_source": None, "params": 2}


def _row(name, param_step=None, param_spread=0.0, grad_step=None, grad_spread=0.0, status="synced",
         missing=0, wrapper=0, first_compared=0):
    return {"name": name, "module": name.rpartition(".")[0], "wrapper": wrapper, "status": status,
            "first_compared": first_compared, "param_first_step": param_step, "param_spread": param_spread,
            "param_norms": None if param_step is None else (1.02, 1.0), "grad_first_step": grad_step,
            "grad_spread": grad_spread, "grad_norms": None if grad_step is None else ((0.5, -1.0) if missing else (0.5, 0.4)),
            "grad_missing_steps": missing}


def _stats(rows, use=None, wrappers=(WRAPPER,)):
    use = use if use is not None else {s: ((1, True, 0),) for s in range(5)}
    return stats(steps=5, derived={"replicas": {"wrappers": tuple(wrappers), "params": tuple(rows), "use": use}})


def test_lk401_lk402_a_forward_around_the_wrapper_points_at_that_forward():
    wrapper = {**WRAPPER, "bypass_source": {"file": "train.py", "line": 20}}
    data = _stats([_row("fc.weight", 0, 0.02, 0, 0.3), _row("fc.bias", 0, 0.5, 0, 0.4)],
                  use={s: ((0, None, 1),) for s in range(5)}, wrappers=(wrapper,))
    params = fires("LK401", data)
    assert (params.severity, params.step, params.source.line, params.module) == (Severity.ERROR, 0, 20, "fc")
    assert params.evidence["cause"] == "bypassed" and params.evidence["params"] == ["fc.bias", "fc.weight"]
    assert "2 of 2 replica parameters" in params.message and "train.py:20" in params.message
    assert "not the DDP wrapper built at train.py:12" in params.message and "(LK402)" in params.message
    grads = fires("LK402", data)
    assert (grads.step, grads.source.line, grads.evidence["cause"]) == (0, 20, "bypassed")


def test_lk402_no_sync_at_the_last_micro_step():
    use = {0: ((4, True, 0),), 1: ((4, True, 0),), 2: ((4, False, 0),)}
    found = fires("LK402", _stats([_row("fc.weight", 2, 1e-3, 2, 0.2)], use=use))
    assert found.evidence["cause"] == "no_sync" and found.step == 2 and found.source.line == 12
    assert "step 2 ran with require_backward_grad_sync=False (no_sync() in force)" in found.message
    # the unsynced forward's line, when the run saw it, is the line to look at
    wrapper = {**WRAPPER, "no_sync_source": {"file": "train.py", "line": 41}}
    found = fires("LK402", _stats([_row("fc.weight", 2, 1e-3, 2, 0.2)], use=use, wrappers=(wrapper,)))
    assert found.source.line == 41 and "step 2 (at train.py:41) ran with" in found.message


def test_lk401_a_replaced_layer_is_named_and_the_others_are_not():
    rows = [_row("fc.weight"), _row("head.weight", 0, 0.3, 0, 0.2, status="replaced")]
    found = fires("LK401", _stats(rows))
    assert found.evidence["cause"] == "replaced" and found.evidence["params"] == ["head.weight"]
    assert "1 of 2 replica parameters" in found.message and "head.weight was put in the module after" in found.message


def test_lk401_weights_apart_at_the_first_step_compared_name_the_init_never_broadcast():
    found = fires("LK401", _stats([_row("fc.weight", 0, 0.4)], wrappers=({**WRAPPER, "init_sync": False},)))
    assert found.evidence["cause"] == "init_not_broadcast" and "init_sync=False" in found.message
    quiet("LK402", _stats([_row("fc.weight", 0, 0.4)]))   # the gradients are averaged: equal


def test_lk402_a_gradient_on_some_ranks_only():
    found = fires("LK402", _stats([_row("expert.weight", grad_step=3, grad_spread=0.0, missing=2)]))
    assert found.evidence["cause"] == "used_on_some_ranks"
    assert "a gradient on some ranks, none on others" in found.message


def test_lk401_lk402_equal_replicas_and_no_replicas_are_quiet():
    healthy = _stats([_row("fc.weight"), _row("fc.bias")])
    quiet("LK401", healthy)
    quiet("LK402", healthy)
    quiet("LK401", stats(steps=5))   # one process, or no DDP: nothing derived
    quiet("LK402", stats(steps=5, derived={"replicas": {"wrappers": (), "params": (), "use": {}}}))


def test_lk401_lk402_a_parameter_unfrozen_after_wrapping():
    data = _stats([_row("fc.weight"), _row("head.weight", 1, 0.01, 1, 0.3, status="frozen_at_wrap")])
    for code in ("LK401", "LK402"):
        found = fires(code, data)
        assert found.evidence["cause"] == "frozen_at_wrap" and found.step == 1 and found.source.line == 12
        assert "head.weight did not require grad when the wrapper built at train.py:12 was built" in found.message


def test_lk401_a_model_wrapped_afresh_later_and_no_visible_cause():
    later = {**WRAPPER, "source": {"file": "train.py", "line": 30}, "built_step": 3}
    found = fires("LK401", _stats([_row("fc.weight", 4, 0.01, wrapper=1, first_compared=3)],
                                  use={s: ((1, True, 0), (1, True, 0)) for s in range(5)}, wrappers=(WRAPPER, later)))
    assert found.evidence["cause"] == "wrapped_afresh" and "built at steps 0, 3" in found.message
    assert found.source.line == 30
    alone = fires("LK401", _stats([_row("fc.weight", 4, 0.01)]))
    assert alone.evidence["cause"] == "unknown" and "leaky saw no cause" in alone.message


def test_lk401_notes_the_steps_whose_ranks_held_different_wrappers():
    data = _stats([_row("fc.weight")])
    assert not [line for line in run_notes(data, AuditConfig()) if "LK401" in line]
    apart = stats(steps=5, derived={"replicas": {"wrappers": (WRAPPER,), "params": (), "use": {}, "uncompared_steps": 3}})
    quiet("LK401", apart)
    assert [line for line in run_notes(apart, AuditConfig()) if "LK401" in line] == [
        "On 3 sampled steps the ranks' DDP wrappers did not hold the same parameters (a wrapper or a parameter on "
        "some ranks only), so their replicas were not compared there (LK401, LK402)."]


def test_lk401_lk402_name_the_ranks_apart():
    one_of_four = {**_row("fc.weight", 0, 0.3, 0, 0.2), "param_ranks": [[0, 1, 3], [2]], "grad_ranks": [[0], [1]]}
    params = fires("LK401", _stats([one_of_four]))
    assert "; rank 2 differs from ranks 0, 1, 3)" in params.message and params.evidence["ranks"] == [[0, 1, 3], [2]]
    assert "; ranks 0 and 1 differ)" in fires("LK402", _stats([one_of_four])).message
    split = {**one_of_four, "param_ranks": [[0, 1], [2, 3]]}
    assert "the ranks split into ranks 0, 1; ranks 2, 3" in fires("LK401", _stats([split])).message
    each = {**one_of_four, "param_ranks": [[0], [1], [2], [3]]}
    assert "all 4 ranks differ from each other" in fires("LK401", _stats([each])).message
