"""The benchmarks that need a machine the test suite does not have still start: on the CPU,
benchmarks/gpu.py says which CUDA parts it skipped and runs its CPU smoke of the same code
paths (models, workers, leaky's modes, the sync check's counting). No timing is asserted."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script times the GPU instead")
def test_gpu_benchmark_runs_its_cpu_smoke_and_says_what_it_skipped():
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    # The quickest run: one model, two leaky modes besides plain (each mode is a spawned process).
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--quick", "--models", "gpt",
                           "--modes", "audit-held,watch-default", "--cpu", "-1"],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    out = proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no CUDA device: skipped the GPU timings" in out
    assert "no CUDA device: skipped the sync check" in out
    assert "no CUDA device: skipped peak device memory" in out
    assert "Time on cpu" in out and "audit-held" in out and "watch-default" in out
    assert "FAILED" not in out and "LEAKY INTERNAL ERROR" not in out, out + proc.stderr
    assert "overhead budget" in out and "no CUDA device: skipped (python benchmarks/budget.py" in out


def test_the_budget_benchmark_runs_a_watch_and_a_plain_run_and_tabulates_what_the_watch_said():
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "budget.py"), "--models", "d10",
                           "--steps", "30", "--rounds", "1"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| d10 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5] == "1"   # 30 steps: the first step's probes use the whole budget, no step after it is sampled
    assert cells[4].endswith("%")


def test_the_stand_ins_for_public_programs_train_and_a_watch_finds_nothing_on_them():
    """benchmarks/standins.py: each stand-in (the one that needs transformers only where it is
    installed) takes real steps, its loss goes down, and a watch over them reports no
    finding and no internal error: the overhead tables time healthy programs."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from standins import STANDINS, missing
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    import leaky

    ran = []
    for name, build in STANDINS.items():
        if missing(name):
            continue
        torch.manual_seed(0)
        work = build(True)
        with leaky.watch(every=5) as run:
            for _ in range(40):
                work.step()
        assert run.recorder.error is None, (name, run.recorder.error)
        assert run.recorder.steps_done >= 8, name
        assert [f.code for f in run.findings] == [], (name, [f.message for f in run.findings])
        ran.append(name)
    assert {"nanogpt", "mingpt", "dcgan"} <= set(ran)


def test_a_default_audit_run_block_and_the_phase_split_run_and_report(capsys):
    """overhead.py's audit-run mode: one block is a whole default audit (its steps observed,
    the rest of the block plain), and its timed exit builds the report; audit_phases.py
    prints one row per phase and one for the whole step; audit_entry_points.py times the
    recorder's entry points and puts them back. No timing is asserted."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import audit_entry_points
        import audit_phases
        from _harness import WorkerOptions, time_block
        from _modes import make_runner

        from leaky.config import AuditConfig
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    options = WorkerOptions(quick=True, seed=0, threads=1, cpu=None, malloc={}, store_dir=None, cockpit_max_gb=1.0)
    runner = make_runner("audit-run", "mlp", options)
    runner.setup()
    steps = AuditConfig().steps
    block = time_block(runner, steps + 2, untimed_first=False)
    assert len(block.times) == steps + 2 and block.exit_s > 0
    assert runner.info["steps_recorded"] == steps and "error" not in runner.info
    assert audit_phases.main(["--steps", "2", "2"]) == 0
    out = capsys.readouterr().out
    assert all(f"| 2 | {phase} |" in out for phase in (*audit_phases.PHASES, "whole step"))
    audit_entry_points.measure("2", steps=2)   # every entry point is found, timed and put back
    out = capsys.readouterr().out
    assert "| Recorder.on_op | 6 |" in out and "| GradientRecorder._record |" in out
    from leaky.record.recorder import Recorder
    assert Recorder.on_op.__qualname__ == "Recorder.on_op" and not hasattr(Recorder.on_op, "__wrapped__")
    audit_entry_points.measure_watch("2", steps=5)   # a watch's unsampled steps: none sampled, all put back
    out = capsys.readouterr().out
    assert "depth 2:" in out and "0 sampled" in out and "| distributed.total_norm (inside) | 1.0 |" in out
    from leaky.process import distributed
    from leaky.record import monitor
    assert not hasattr(distributed.total_norm, "__wrapped__") and not hasattr(monitor.present_grads, "__wrapped__")


def test_the_small_rnn_benchmark_asks_for_a_makemore_checkout(tmp_path):
    """benchmarks/small_rnn.py times makemore's own RNN and GRU, which leaky does not ship:
    without a folder holding makemore.py it says so and exits 2, having timed nothing."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "small_rnn.py"), "--makemore", str(tmp_path), "gru"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and f"no makemore.py in {tmp_path}" in proc.stderr, proc.stdout + proc.stderr


def test_the_call_counter_takes_its_depths_and_answers_help():
    """benchmarks/watch_calls.py: `--help` prints its usage (it once read "--help" as a depth
    and crashed), a depth that is no number is refused with exit 2, and a small depth is
    counted both ways (an unsampled watch step and an audited one)."""
    script = str(ROOT / "benchmarks" / "watch_calls.py")
    shown = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0 and "usage: watch_calls.py" in shown.stdout, shown.stderr
    refused = subprocess.run([sys.executable, script, "ten"], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2 and "invalid int value" in refused.stderr
    for extra in ([], ["--audit"]):
        proc = subprocess.run([sys.executable, script, *extra, "2"], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("depth 2: ") and ("unsampled" in proc.stdout) != bool(extra), proc.stdout
