"""The set-up differences of two reports (leaky/diff/config.py), on hand-built `config`
rows: the function reads only them."""
from __future__ import annotations

from leaky.diff.config import compare_config


def _calls(*modes_and_lines):
    return [{"mode": mode, "type": "GPT", "module": "GPT", "source": {"file": "/p/train.py", "line": line}}
            for mode, line in modes_and_lines]


def test_a_train_call_that_b_no_longer_makes_points_at_b_s_last_call():
    a = {"config": {"modes": _calls(("train", 10), ("eval", 190), ("train", 202))}}
    b = {"config": {"modes": _calls(("train", 10), ("eval", 190))}}
    (row,) = compare_config(a, b)
    assert row["kind"] == "mode" and row["source_b"]["line"] == 190
    assert "stays in force" in row["why"] and "train.py:202" in row["why"]


def test_renamed_modules_with_the_same_modes_are_no_difference():
    a = {"config": {"modes": _calls(("train", 10), ("eval", 20))}}
    b = {"config": {"modes": [dict(c, type="Classifier", module="net") for c in _calls(("train", 11), ("eval", 21))]}}
    assert compare_config(a, b) == []


def test_a_learning_rate_is_set_not_drawn_so_any_change_counts():
    optimizer = {"kind": "SGD", "initial_lrs": [0.1], "lr_range": [[0.1, 0.1]], "source": {"file": "t.py", "line": 3}}
    a = {"config": {"optimizers": [optimizer]}}
    b = {"config": {"optimizers": [dict(optimizer, initial_lrs=[0.01], lr_range=[[0.01, 0.01]])]}}
    whats = [row["what"] for row in compare_config(a, b)]
    assert "optimizer 0 learning rate" in whats
    assert compare_config(a, a) == []
