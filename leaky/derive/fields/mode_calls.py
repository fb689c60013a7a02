"""`stats.derived["mode_calls"]`: the script's `train()`/`.eval()` calls (record/instruments/mode_calls.py),
each named as the report names modules elsewhere, or by its class when the run never met it."""
from __future__ import annotations

from leaky.derive.fields import derived
from leaky.record.run_record import RunRecord


@derived("mode_calls")
def mode_calls(run: RunRecord, sums) -> tuple[dict, ...]:
    """Per call, in order: {module, type, mode ("train" | "eval"), source {file, line}, step}."""
    calls = run.parts.get("mode_calls", ())
    keys = {id(info.module): info.key for info in run.modules.infos}
    return tuple({"module": _name(run, keys, call), "type": call.type_name,
                  "mode": "train" if call.training else "eval",
                  "source": {"file": call.where[0], "line": call.where[1]}, "step": call.step} for call in calls)


def _name(run: RunRecord, keys: dict[int, int], call) -> str:
    module = call.module()
    key = None if module is None else keys.get(id(module))
    name = None if key is None else run.modules.name(key)
    return name or call.type_name
