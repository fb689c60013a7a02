"""Which site of B is which site of A (leaky/diff/align.py), on hand-built ops[] rows: the
function reads only the rows' op, module, order and site, and these are the shapes a rename,
a swapped op, a removed op and an added one give."""
from __future__ import annotations

from leaky.diff.align import align


def _ops(*rows):
    return [{"site": i, "op": op, "module": module, "order": 10 + 2 * i} for i, (op, module) in enumerate(rows)]


MLP = [("linear", "fc1"), ("relu", "act1"), ("linear", "fc2"), ("relu", "act2"), ("linear", "out"),
       ("cross_entropy", None)]
TYPES = {"fc1": "Linear", "fc2": "Linear", "out": "Linear", "act1": "ReLU", "act2": "ReLU"}


def _statuses(pairs):
    return [(p.status, (p.a or {}).get("module"), (p.b or {}).get("module")) for p in pairs]


def test_the_same_program_aligns_site_by_site_from_the_loss():
    pairs = align(_ops(*MLP), _ops(*MLP), TYPES, TYPES)
    assert [p.status for p in pairs] == ["same"] * 6
    assert [p.a["op"] for p in pairs] == ["cross_entropy", "linear", "relu", "linear", "relu", "linear"]
    assert all(p.a["module"] == p.b["module"] for p in pairs)


def test_a_rename_aligns_by_op_and_module_class():
    renamed = {"fc1": "encoder", "act1": "enc_act", "fc2": "hidden", "act2": "hid_act", "out": "head"}
    b = _ops(*[(op, renamed.get(module, module)) for op, module in MLP])
    types_b = {renamed[k]: v for k, v in TYPES.items()}
    pairs = align(_ops(*MLP), b, TYPES, types_b)
    assert [p.status for p in pairs] == ["same"] * 6
    assert [(p.a["module"], p.b["module"]) for p in pairs][1:] == [
        ("out", "head"), ("act2", "hid_act"), ("fc2", "hidden"), ("act1", "enc_act"), ("fc1", "encoder")]


def test_a_swapped_activation_is_one_site_whose_op_changed():
    b = _ops(*[("clamp", None) if module == "act2" else (op, module) for op, module in MLP])
    pairs = align(_ops(*MLP), b, TYPES, {k: v for k, v in TYPES.items() if k != "act2"})
    assert _statuses(pairs)[2] == ("changed_op", "act2", None)
    assert [p.status for p in pairs].count("same") == 5


def test_a_removed_op_is_on_one_side_only_and_the_rest_still_aligns():
    b = _ops(*[row for row in MLP if row[1] != "act1"])
    pairs = align(_ops(*MLP), b, TYPES, TYPES)
    assert ("only_a", "act1", None) in _statuses(pairs)
    assert [p.status for p in pairs].count("same") == 5
    assert next(p for p in pairs if p.a and p.a["module"] == "fc1").b["module"] == "fc1"


def test_an_added_op_is_in_b_only():
    b = _ops(*MLP[:5], ("clamp", None), MLP[5])
    pairs = align(_ops(*MLP), b, TYPES, TYPES)
    assert _statuses(pairs)[1] == ("only_b", None, None)
    assert pairs[1].b["op"] == "clamp"
