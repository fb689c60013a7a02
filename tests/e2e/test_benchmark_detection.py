"""A CI subset of the detection benchmark (benchmarks/detection.py, docs/benchmarks.md):
a few zoo cases run through `leaky audit` exactly as the full benchmark runs them, one
per way a training-dynamics finding is located, and healthy look-alikes that must stay
quiet. The full run: `python benchmarks/detection.py --jobs 2 --markdown`."""
from __future__ import annotations

import concurrent.futures
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKEN = {
    "b17-warmup-integer-division": "a scheduler's lr function set the rate to 0",
    "b18-head-replaced-after-optimizer": "a layer created after the optimizer was built",
    "b21-zero-grad-once-per-epoch": "zero_grad() outside the batch loop",
    "b35-model-half-no-scaler": "model.half() without a loss scaler",
    "b40-zero-grad-between-backward-and-step": "zero_grad() between backward() and step()",
}
HEALTHY = ["h11-warmup-cosine", "h12-gan-two-optimizers"]


def _detection():
    spec = importlib.util.spec_from_file_location("detection", ROOT / "benchmarks" / "detection.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    detection = _detection()
    cases = [detection.ZOO / name for name in [*BROKEN, *HEALTHY]]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        return {r["case"]: r for r in pool.map(detection.run_case, cases)}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_case_is_detected_and_localized(results, case):
    result = results[case]
    assert result["status"] == "ok", result.get("detail") or result["output_tail"]
    for expect in result["expect"]:
        assert expect["detected"] and expect["localized"], (BROKEN[case], expect, result["findings"])


@pytest.mark.parametrize("case", HEALTHY)
def test_healthy_case_has_no_false_alarm(results, case):
    result = results[case]
    assert result["status"] == "ok", result.get("detail") or result["output_tail"]
    assert not result["false_alarms"], result["false_alarms"]
