"""LK403 norm-per-shard on hand-built stats: the clip's norm against the global norm of the
same gradients, as record/instruments/clip_norms.py and derive/fields/clip_norms.py give them."""
from __future__ import annotations

from leaky.finding import Severity
from leaky.testing import stats
from tests.check_cases import fires, quiet


def _clip(norm: float, global_norm: float, *, call: str = "clip_grad_norm_", line: int = 30,
          covered: tuple = ("FSDP1 flat parameters",), dtype: str = "float32", ranks: int = 2) -> dict:
    return {"call": call, "source": {"file": "train.py", "line": line}, "step": 0, "covered": list(covered),
            "tensors": 2, "dtype": dtype, "eps": {"float32": 2 ** -23, "bfloat16": 2 ** -7}[dtype], "ranks": ranks, "norm": norm, "global_norm": global_norm,
            "ratio": norm / global_norm, "norm_mean": norm, "norm_spread": 0.0}


def _stats(*clips: dict):
    return stats(derived={"clip_norms": tuple(clips)})


def test_lk403_a_clip_on_this_ranks_shard_is_an_error_naming_its_line_ratio_and_the_wrappers_clip():
    finding = fires("LK403", _stats(_clip(0.7071, 1.0)))
    assert (finding.severity, finding.source.line, finding.step) == (Severity.ERROR, 30, 0)
    assert "a ratio of 0.707 (1/√2 = 0.707 when the shards are alike)" in finding.message
    assert "model.clip_grad_norm_(max_norm)" in finding.fix
    assert finding.evidence["ratio"] == 0.7071 and finding.evidence["ranks"] == 2


def test_lk403_a_local_norm_handed_to_the_clip_is_one_finding_at_the_clip_naming_the_norms_line():
    norm = _clip(0.5, 1.0, call="get_total_norm", line=28, covered=("local shards (to_local())",))
    clip = _clip(0.5, 1.0, call="clip_grads_with_norm_", line=29, covered=("DTensor shards",))
    finding = fires("LK403", _stats(norm, clip))
    assert finding.source.line == 29 and "get_total_norm at train.py:28" in finding.message
    assert "Clip the DTensor gradients themselves" in finding.fix


def test_lk403_a_global_norm_within_float_rounding_is_quiet():
    quiet("LK403", _stats(_clip(1.0 + 4e-6, 1.0)))        # float32 summation order
    quiet("LK403", _stats(_clip(1.0 + 0.02, 1.0, dtype="bfloat16")))   # a norm rounded to bfloat16
    quiet("LK403", _stats())                                # no clip, or a single process
    quiet("LK403", _stats(_clip(float("nan"), 1.0)))        # a non-finite norm: nothing to compare


def test_lk403_the_tolerance_is_the_dtypes_rounding_not_a_fixture_number():
    fires("LK403", _stats(_clip(1.0 + 1e-3, 1.0)))          # 1e-3 is no float32 rounding
    fires("LK403", _stats(_clip(0.707, 1.0, dtype="bfloat16")))
