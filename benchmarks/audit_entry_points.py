"""Time spent in each of the audit recorder's entry points, per call and per step, in place.

    python benchmarks/audit_entry_points.py 50        # watch_calls.py's width-64 MLP, depth 50
    python benchmarks/audit_entry_points.py mingpt    # a model of overhead.py (benchmark or stand-in)

cProfile charges every Python call, which inflates a recorder that makes many small ones;
a microbenchmark of one function runs it hot in the caches, which a training step does not.
This script wraps each entry point below (on its class or module, for the length of the
run) in a perf_counter pair and runs 40 steps inside one held `leaky.audit(steps=None)`,
after 5 steps in it: each figure is the time of that function and everything it calls,
during real steps. Nested entries (`_norms` inside `_record`) are also inside their
caller's figure, and each wrapper adds its own ~1-2 µs to its callers. Plus the garbage
collector's time per step (gc.callbacks), plain and audited.

    python benchmarks/audit_entry_points.py --watch 10 50 200
    python benchmarks/audit_entry_points.py --watch mlp cnn lstm transformer nanogpt mingpt dcgan hf-gpt2

With --watch (a depth, or a model of overhead.py), the same for a watch's unsampled step, the step `leaky watch` runs 99 times in
100 at its defaults: one `leaky.watch(every=10**6)` held open, 110 untimed steps (past its
audited first steps and the COUPLING_STEPS that probe whose loss reaches whom), then 100
timed ones, none sampled. Its entry points are what torch calls into leaky in such a step;
the top-level ones (not inside another) sum to leaky's own time per step, set against the
plain step's time taken in blocks before and after the watch in the same process.
"""
import collections
import contextlib
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
    ("leaky.record.forward", "ForwardTaps", "observe"),
    ("leaky.record.feedback", "FeedbackUses", "note_matmul"),
    ("leaky.record.gradients", "GradientRecorder", "watch"),
    ("leaky.record.gradients", "GradientRecorder", "_record"),
    ("leaky.record.gradients", "GradientRecorder", "_norms"),
    ("leaky.record.gradients", "GradientRecorder", "_note_fresh"),
    ("leaky.record.gradients", None, "_count_nonzero"),
    ("leaky.record.activations", None, "positive_counts"),
    ("leaky.record.monitor", "UpdateMeter", "before_step"),
    ("leaky.record.monitor", "UpdateMeter", "after_step"),
    ("leaky.record.steps", "StepTracking", "_note_backward"),   # holds count_held: the kept ReLU outputs' fire counts
    ("leaky.record.steps", "StepTracking", "_flush"),
    ("leaky.record.activations", "UnitStats", "fold_outputs"),   # a sigmoid's or tanh's kept outputs: histogram, flat counts
    ("leaky.record.step_record", "StepBuffer", "flush"),
    ("leaky.derive.accumulate", "StepFolder", "add_step"),
]

# what an unsampled watch step calls; the first four are called by torch (the rest inside them)
WATCH_TOP = ["StepTracking._note_backward", "StepTracking._before_opt_step", "StepTracking._after_opt_step",
             "OriginRecords._zero_grad"]
WATCH_ENTRY_POINTS = [
    ("leaky.record.steps", "StepTracking", "_note_backward"),
    ("leaky.record.steps", "StepTracking", "_before_opt_step"),
    ("leaky.record.steps", "StepTracking", "_after_opt_step"),
    ("leaky.record.origins", "OriginRecords", "_zero_grad"),
    ("leaky.record.monitor", "StepMonitor", "note_loss"),
    ("leaky.record.steps", "StepTracking", "_probe_old_grads"),
    ("leaky.record.steps", "StepTracking", "_end_step"),
    ("leaky.record.monitor", "StepMonitor", "end_step"),
    ("leaky.process.distributed", None, "sharded_squares"),
    ("leaky.process.distributed", None, "total_norm"),
    ("leaky.record.monitor", None, "present_grads"),
    ("leaky.record.steps", "StepTracking", "_sample"),
    ("leaky.record.sites", "SourceLocator", "locate"),
]


def wrap_all(spent: dict, calls: collections.Counter, entry_points=ENTRY_POINTS) -> list:
    """Wrap every entry point; returns what to put back."""
    clock = time.perf_counter
    undo = []
    for module_name, class_name, name in entry_points:
        owner = importlib.import_module(module_name)
        if class_name is not None:
            owner = getattr(owner, class_name)
        label = f"{class_name or module_name.rsplit('.', 1)[-1]}.{name}"
        original = owner.__dict__.get(name) if class_name is not None else getattr(owner, name, None)
        if original is None:
            continue   # not in this tree (an older one, timed for a before/after)

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


@contextlib.contextmanager
def instrumented(entry_points=ENTRY_POINTS):
    """(seconds, calls) per entry point and the GC's seconds ("gc"), while the entry points
    are wrapped and the GC timed; everything is put back on exit."""
    spent, calls, collected = collections.defaultdict(float), collections.Counter(), collections.defaultdict(float)
    callback = gc_timer(collected)
    gc.callbacks.append(callback)
    undo = wrap_all(spent, calls, entry_points)
    try:
        yield spent, calls, collected
    finally:
        gc.callbacks.remove(callback)
        for owner, attribute, original in undo:
            setattr(owner, attribute, original)


def measure(name: str, steps: int = 40) -> None:
    loop = workload_loop(name)
    loop(3)
    with instrumented() as (spent, calls, collected):
        loop(steps)   # plain: the wrapped entry points are leaky's, not called here
        plain_gc = collected.pop("gc", 0.0)
        with leaky.audit(steps=None):
            loop(5)
            spent.clear(), calls.clear(), collected.clear()
            start = time.perf_counter()
            loop(steps)
            total = time.perf_counter() - start
    label = f"depth {name}" if name.isdigit() else name
    print(f"{label}: {1e3 * total / steps:.1f} ms per audited step (wrapped); garbage collection "
          f"{1e3 * collected.get('gc', 0.0) / steps:.2f} ms a step audited, {1e3 * plain_gc / steps:.2f} plain")
    print("| entry point | calls per step | µs per call | ms per step |")
    print("|---|---:|---:|---:|")
    for label, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {calls[label] / steps:.0f} | {1e6 * seconds / calls[label]:.1f} | "
              f"{1e3 * seconds / steps:.2f} |")


def timed_steps(loop, blocks: int, steps: int) -> list[float]:
    """Seconds per step of each block."""
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        loop(steps)
        times.append((time.perf_counter() - start) / steps)
    return times


def workload_loop(name: str):
    """loop(n) for a depth (watch_calls.py's MLP), a benchmark model or a stand-in (overhead.py's names)."""
    if name.isdigit():
        return training_loop(int(name))
    from audit_overhead import BUILDERS
    from standins import STANDINS, missing
    if name in STANDINS and missing(name):
        raise SystemExit(f"{name}: {missing(name)}")
    work = BUILDERS[name](False) if name in BUILDERS else STANDINS[name](False)

    def loop(n):
        for _ in range(n):
            work.step()
    return loop


def measure_watch(name: str, steps: int = 100) -> None:
    import tempfile
    loop = workload_loop(name)
    loop(3)
    with instrumented(WATCH_ENTRY_POINTS) as (spent, calls, collected):
        plain = timed_steps(loop, 5, steps // 5)
        plain_gc = collected.pop("gc", 0.0)
        with tempfile.TemporaryDirectory() as folder:
            with leaky.watch(every=10**6, store=os.path.join(folder, "runs.db")) as run:
                loop(110)
                sampled_before = run.recorder.steps_done
                spent.clear(), calls.clear(), collected.clear()
                watched = timed_steps(loop, 5, steps // 5)
                watch_gc = collected.pop("gc", 0.0)
                sampled = run.recorder.steps_done - sampled_before
        plain += timed_steps(loop, 5, steps // 5)
        plain_gc += collected.pop("gc", 0.0)
    own = sum(spent[label] for label in WATCH_TOP) / steps
    reference = min(plain)
    label = f"depth {name}" if name.isdigit() else name
    print(f"{label}: plain {1e3 * reference:.2f} ms per step (best of 10 blocks of {steps // 5}, before and "
          f"after), unsampled watch {1e3 * min(watched):.2f} (best of 5 blocks; {sampled} sampled); leaky's own "
          f"{1e6 * own:.0f} µs a step = {100 * own / reference:.1f}% of the plain step; garbage collection "
          f"{1e6 * watch_gc / steps:.0f} µs a step watched, {1e6 * plain_gc / (2 * steps):.0f} plain")
    print("| entry point | calls per step | µs per call | µs per step |")
    print("|---|---:|---:|---:|")
    for label, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        top = "" if label in WATCH_TOP else " (inside)"
        print(f"| {label}{top} | {calls[label] / steps:.1f} | {1e6 * seconds / calls[label]:.1f} | "
              f"{1e6 * seconds / steps:.1f} |")


if __name__ == "__main__":
    torch.set_num_threads(1)
    args = sys.argv[1:]
    watch = "--watch" in args
    for arg in [a for a in args if a != "--watch"] or ["50"]:
        if watch:
            measure_watch(arg)
        else:
            measure(arg)
