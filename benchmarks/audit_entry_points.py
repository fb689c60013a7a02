"""Time spent in each of the audit recorder's entry points, per call and per step, in place.

    python benchmarks/audit_entry_points.py 50        # watch_calls.py's width-64 MLP, depth 50

cProfile charges every Python call, which inflates a recorder that makes many small ones;
a microbenchmark of one function runs it hot in the caches, which a training step does not.
This script wraps each entry point below (on its class or module, for the length of the
run) in a perf_counter pair and runs 40 steps inside one held `leaky.audit(steps=None)`,
after 5 steps in it: each figure is the time of that function and everything it calls,
during real steps. Nested entries (`_norms` inside `_record`) are also inside their
caller's figure, and each wrapper adds its own ~1-2 µs to its callers. Plus the garbage
collector's time per step (gc.callbacks), plain and audited.
"""
import collections
import functools
import gc
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import leaky  # noqa: E402

from watch_calls import training_loop  # noqa: E402

# (module, class or None, function): the recorder's entry points and what they call most
ENTRY_POINTS = [
    ("leaky.record.recorder", "Recorder", "on_op"),
    ("leaky.record.recorder", "Recorder", "_check_finite"),
    ("leaky.record.recorder", "Recorder", "_update_units"),
    ("leaky.record.sites", "SourceLocator", "locate"),
    ("leaky.record.sites", "SiteTable", "find"),
    ("leaky.record.forward", "ForwardProbes", "observe"),
    ("leaky.record.feedback", "FeedbackWatch", "note_matmul"),
    ("leaky.record.gradients", "GradientRecorder", "watch"),
    ("leaky.record.gradients", "GradientRecorder", "_record"),
    ("leaky.record.gradients", "GradientRecorder", "_norms"),
    ("leaky.record.gradients", "GradientRecorder", "_note_fresh"),
    ("leaky.record.gradients", None, "_count_nonzero"),
    ("leaky.record.activations", None, "positive_counts"),
    ("leaky.record.monitor", "UpdateProbe", "before_step"),
    ("leaky.record.monitor", "UpdateProbe", "after_step"),
    ("leaky.record.steps", "StepTracking", "_flush"),
    ("leaky.record.step_record", "StepBuffer", "flush"),
    ("leaky.derive.accumulate", "StepFolder", "add_step"),
]


def wrap_all(spent: dict, calls: collections.Counter) -> list:
    """Wrap every entry point; returns what to put back."""
    clock = time.perf_counter
    undo = []
    for module_name, class_name, name in ENTRY_POINTS:
        owner = importlib.import_module(module_name)
        if class_name is not None:
            owner = getattr(owner, class_name)
        label = f"{class_name or module_name.rsplit('.', 1)[-1]}.{name}"
        original = owner.__dict__[name] if class_name is not None else getattr(owner, name)

        def timed(*args, _f=original, _label=label, **kwargs):
            start = clock()
            try:
                return _f(*args, **kwargs)
            finally:
                spent[_label] += clock() - start
                calls[_label] += 1

        setattr(owner, name, functools.wraps(original)(timed))
        undo.append((owner, name, original))
    return undo


def gc_timer(spent: dict):
    started = [0.0]

    def callback(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent["gc"] += time.perf_counter() - started[0]
    return callback


def measure(depth: int, steps: int = 40) -> None:
    loop = training_loop(depth)
    loop(3)
    collected = collections.defaultdict(float)
    callback = gc_timer(collected)
    gc.callbacks.append(callback)
    try:
        loop(steps)
        plain_gc = collected.pop("gc", 0.0)
        spent, calls = collections.defaultdict(float), collections.Counter()
        undo = wrap_all(spent, calls)
        try:
            with leaky.audit(steps=None):
                loop(5)
                spent.clear(), calls.clear(), collected.clear()
                start = time.perf_counter()
                loop(steps)
                total = time.perf_counter() - start
        finally:
            for owner, name, original in undo:
                setattr(owner, name, original)
    finally:
        gc.callbacks.remove(callback)
    print(f"depth {depth}: {1e3 * total / steps:.1f} ms per audited step (wrapped); garbage collection "
          f"{1e3 * collected.get('gc', 0.0) / steps:.2f} ms a step audited, {1e3 * plain_gc / steps:.2f} plain")
    print("| entry point | calls per step | µs per call | ms per step |")
    print("|---|---:|---:|---:|")
    for label, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {calls[label] / steps:.0f} | {1e6 * seconds / calls[label]:.1f} | "
              f"{1e3 * seconds / steps:.2f} |")


if __name__ == "__main__":
    torch.set_num_threads(1)
    for arg in sys.argv[1:] or ["50"]:
        measure(int(arg))
