"""The contract between record/ and derive/, checked: derive/ is handed a RunRecord, each
step's HostStep and the units' UnitStats, and nothing else of record/; every collective
across ranks is in process/distributed.py and runs through its one per-step call; record/
maps its own room."""
from __future__ import annotations

import ast
import inspect

from leaky.derive import build_stats
from leaky.record.run_record import RunRecord
from tests.meta.test_architecture import FILES, TYPED_GRAPH, _under

# what record/ hands derive/: the run's frozen record, a step's host values, the units' counters
RECORD_TYPES = {"leaky.record.run_record", "leaky.record.step_record", "leaky.record.activations"}
COLLECTIVES = {"all_reduce", "all_gather", "all_gather_object", "all_to_all", "broadcast", "broadcast_object_list",
               "reduce_scatter", "reduce_scatter_tensor", "all_gather_into_tensor", "barrier", "gather_object",
               "scatter_object_list", "send", "recv", "isend", "irecv"}


def test_derive_imports_from_record_only_its_record_types():
    reaching = {name: sorted(t for t in TYPED_GRAPH[name] if _under(t, "leaky.record") and t not in RECORD_TYPES)
                for name in FILES if _under(name, "leaky.derive")}
    assert {name: found for name, found in reaching.items() if found} == {}
    assert any(RECORD_TYPES & TYPED_GRAPH[name] for name in reaching)   # the scan sees derive's real imports


def test_build_stats_is_given_a_run_record_and_the_sums_alone():
    params = inspect.signature(build_stats).parameters
    assert list(params) == ["run", "sums"] and params["run"].annotation in ("RunRecord", RunRecord)


def _distributed_calls(name: str) -> list[str]:
    """`<x>.all_reduce(...)`-style calls to a torch.distributed collective in this file."""
    tree = ast.parse(FILES[name].read_text(encoding="utf-8"))
    return [f"{name}:{node.lineno} {node.func.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in COLLECTIVES]


def test_every_collective_is_in_record_distributed_and_one_call_runs_them_per_step():
    assert _distributed_calls("leaky.process.distributed")   # the scan sees the real ones
    elsewhere = [call for name in FILES if name != "leaky.process.distributed" for call in _distributed_calls(name)]
    assert elsewhere == []
    callers = sorted(name for name, path in FILES.items() if "distributed.exchange(" in path.read_text(encoding="utf-8"))
    assert callers == ["leaky.record.steps"]


def test_record_has_a_package_docstring_that_names_each_of_its_files():
    package = FILES["leaky.record"]
    doc = ast.get_docstring(ast.parse(package.read_text(encoding="utf-8"))) or ""
    files = sorted(f"{name.rpartition('.')[2]}{'/' if FILES[name].name == '__init__.py' else '.py'}"
                   for name in FILES if name.startswith("leaky.record.") and name.count(".") == 2)
    assert "instruments/" in files and [f for f in files if f"`{f}`" not in doc] == []


def test_process_is_a_room_of_leaves_and_the_only_home_of_torch_function_modes():
    """leaky/process/ (patching, frames, guards, the heap, modes, collectives) imports nothing
    else of leaky, and every torch-function mode is its CallMode but the recorder's own OpMode."""
    room = [name for name in FILES if _under(name, "leaky.process")]
    assert "leaky.process.patch" in room and {name: TYPED_GRAPH[name] for name in room if TYPED_GRAPH[name]} == {}
    modes = sorted(name for name, path in FILES.items() if "(TorchFunctionMode)" in path.read_text(encoding="utf-8"))
    assert modes == ["leaky.process.modes", "leaky.record.opmode"]
