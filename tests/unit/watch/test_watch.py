"""leaky watch: sampling, announcements at the right step, the store, fail-fast, kill -9,
bounded memory, and no observer effect."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.derive import accumulate as fold
from leaky.cli import main
from leaky.store import Store
from leaky.zoo import dynamics
from tests.conftest import no_leaky_left
from tests.models import MLP, train


def test_watch_is_bit_identical_and_leaves_nothing(tmp_path):
    def run(watched):
        torch.manual_seed(3)
        model = MLP(dropout=0.1)
        if not watched:
            return train(model, 12), model.state_dict()
        with leaky.watch(every=4, store=tmp_path / "runs.db"):
            losses = train(model, 12)
        return losses, model.state_dict()

    (l1, s1), (l2, s2) = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(l1, l2))
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    assert no_leaky_left() == []


def test_every_steps_gradient_norm_is_that_of_all_the_gradients(tmp_path):
    """The watch's every-step series: on sampled and unsampled steps alike, the total gradient
    norm is the 2-norm of every gradient the optimizer steps with (small ones copied into one
    buffer, the large one normed alone, record/distributed.total_norm)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(300, 300), nn.Tanh(), nn.Linear(300, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    want = []
    with leaky.watch(every=4, store=tmp_path / "runs.db") as run:
        for step in range(30):
            x = torch.randn(32, 300)
            loss = F.cross_entropy(model(x), torch.randint(0, 4, (32,)))
            opt.zero_grad()
            loss.backward()
            want.append(torch.linalg.vector_norm(torch.cat([p.grad.double().reshape(-1) for p in model.parameters()])))
            opt.step()
    rows = {row.step: row.grad_norm for row in run.recorder.builder.series}
    sampled = set(run.recorder.builder.sample_steps)
    assert len(rows) == 30 and 0 < len(sampled) < 30
    for step, norm in enumerate(want):
        assert rows[step] == pytest.approx(float(norm), rel=1e-5), step


def test_check_passes_are_spaced_by_a_tenth_of_the_run(tmp_path, monkeypatch):
    """A check pass reads the whole series, so a long watch spaces its passes by at least a
    tenth of the steps so far (watch.CHECK_SPREAD): their number grows with the log of the run,
    not with its length; a spike late in the run is still reported."""
    import importlib
    watch_module = importlib.import_module("leaky.watch")
    passes = []
    original = watch_module.run_all

    def counted(stats, config):
        passes.append(stats.series[-1].step if stats.series else None)
        return original(stats, config)

    monkeypatch.setattr(watch_module, "run_all", counted)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 8)
    with leaky.watch(every=10, store=tmp_path / "runs.db") as run:
        for step in range(3000):
            loss = model(x).pow(2).mean() * (1e5 if step == 2900 else 1.0)   # one spike, late
            opt.zero_grad()
            loss.backward()
            opt.step()
    during = [s for s in passes[:-1] if s is not None]
    assert 20 < len(during) < 80   # every 10th step would be 300 passes
    assert all(b - a >= max(watch_module.CHECK_GAP, b // watch_module.CHECK_SPREAD) - 10 for a, b in zip(during, during[1:]))
    spikes = [f for f in run.findings if f.code == "LK104" and f.step == 2900]
    assert spikes, [f.code for f in run.findings]


def _lr_jump_loop(steps=60, jump=30):
    """Healthy SGD training, then the learning rate jumps 1000x at `jump` (a schedule bug)."""
    from leaky.zoo._base import batches, data_generator, teacher_classification

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = teacher_classification(512, 20, 10, data_generator(0))
    x = x + 1.0
    for step in range(steps):
        if step == jump:
            for group in opt.param_groups:
                group["lr"] = 10.0
        rows = batches(512, 64, step)
        loss = F.cross_entropy(model(x[rows]), y[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_units_killed_mid_run_are_announced_after_the_jump_with_what_came_before(tmp_path):
    announced = []
    with leaky.Watch(every=5, store=tmp_path / "runs.db",
                     on_finding=lambda f, step: announced.append((step, f))) as run:
        _lr_jump_loop()
    dead = [(step, f) for step, f in announced if f.code == "LK102"]
    assert dead, [f.code for _, f in announced]
    step, finding = dead[0]
    # dead = silent for the trailing window of 5 samples (25 steps here) after dying at ~31
    assert 30 < step <= 60
    assert finding.step is not None and 30 <= finding.step <= 32
    assert "learning rate jumped from 0.01 to 10" in finding.message
    with Store(tmp_path / "runs.db") as store:
        stored = [f for f in store.findings(run.run_id) if f["code"] == "LK102"]
        assert stored and min(f["first_step"] for f in stored) == step
        assert len(store.steps(run.run_id)) == 60
        assert store.run(run.run_id)["status"] == "finished"


def test_dynamics_checks_run_in_watch_mode():
    with leaky.watch(every=5) as run:
        dynamics.run_all_lr_zero(steps=40)
    codes = {f.code for f in run.findings}
    assert {"LK201", "LK204"} <= codes


def test_memory_stays_flat_over_long_runs(monkeypatch):
    monkeypatch.setattr(fold, "SERIES_LIMIT", 50)
    monkeypatch.setattr(fold, "UPDATE_LIMIT", 4)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with leaky.watch(every=10) as run:
        for _ in range(400):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    builder = run.recorder.builder
    assert len(builder.series) == 50 and len(builder.sample_steps) == 40
    assert all(len(u) <= 4 for u in builder.updates.values())
    assert len(run.recorder.grads.handles) == 0 and not run.recorder.buffer.records


SCRIPT = """
import sys, torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(100000 if len(sys.argv) < 2 else int(sys.argv[1])):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    print("step", step, flush=True)
"""


def test_fail_fast_stops_at_the_first_error_and_keeps_the_run(tmp_path, capsys):
    path = tmp_path / "dqn.py"
    path.write_text(textwrap.dedent("""
        from leaky.zoo import karpathy
        karpathy.run_dqn_clamped_td(steps=200)
    """))
    store = tmp_path / "runs.db"
    assert main(["watch", "--every", "5", "--fail-fast", "--store", str(store), str(path)]) == 1
    with Store(store) as s:
        (run,) = s.runs()
        assert run["status"] == "stopped"
        assert run["steps"] < 200
        assert any(f["code"] == "LK106" for f in s.findings(run["id"]))
    assert "--fail-fast stopped training" in capsys.readouterr().out


def test_a_killed_watch_loses_at_most_the_last_unflushed_batch(tmp_path):
    from leaky.record.monitor import StepMonitor

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    store = tmp_path / "runs.db"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "leaky", "watch", "--every", "50", "--store", str(store),
                             str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    last = -1
    deadline = time.monotonic() + 240
    try:
        for line in proc.stdout:
            if line.startswith("step "):
                last = int(line.split()[1])
            if last >= 300 or time.monotonic() > deadline:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
    assert last >= 300
    with Store(store) as s:
        (run,) = s.runs()
        assert run["status"] == "running" and run["alive"] is False
        kept = len(s.steps(run["id"]))
    # steps printed were completed; at most one batch of the monitor was not yet written
    assert kept >= last + 1 - StepMonitor().batch - 1


@pytest.mark.parametrize("args, message", [
    (["runs", "--store", "missing.db"], "no run store"),
    (["show", "7", "--store", "RUNS"], "no run"),
])
def test_runs_and_show_errors_are_one_line(tmp_path, capsys, args, message):
    if args[-1] == "RUNS":
        Store(tmp_path / "runs.db").close()
        args = args[:-1] + [str(tmp_path / "runs.db")]
    else:
        args = args[:-1] + [str(tmp_path / args[-1])]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err.lower() and len(err.strip().splitlines()) == 1


def test_runs_and_show_list_a_stored_run(tmp_path, capsys):
    store = tmp_path / "runs.db"
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert main(["watch", "--every", "10", "--store", str(store), str(script), "30"]) == 0
    capsys.readouterr()
    assert main(["runs", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "finished" in out and "train.py" in out
    assert main(["show", "latest", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "30 steps" in out and "loss" in out


@pytest.mark.parametrize("prepare, message", [
    (lambda p: p.write_bytes(b"this is not sqlite" * 100), "not a sqlite database"),
    (lambda p: None, "directory"),
])
def test_bad_store_paths_are_one_line_errors(tmp_path, capsys, prepare, message):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    store = tmp_path / "runs.db" if message != "directory" else tmp_path / "missing" / "runs.db"
    prepare(store)
    assert main(["watch", "--store", str(store), str(script), "5"]) == 2
    err = capsys.readouterr().err
    assert message in err.lower() and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_store_from_a_newer_leaky_is_refused(tmp_path, capsys):
    import sqlite3

    store = tmp_path / "runs.db"
    Store(store).close()
    with sqlite3.connect(store) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert main(["watch", "--store", str(store), str(script), "5"]) == 2
    assert "newer" in capsys.readouterr().err


def test_at_every_step_the_checks_run_at_most_once_every_ten_steps():
    """Statistics are taken at every sampled step, but the check pass (1-2 ms, more with a
    spectral radius) runs after a sampled step only if the last one was >= CHECK_GAP steps
    before; the pass at the end sees everything."""
    from leaky.watch import CHECK_GAP

    class Sink:
        def __init__(self):
            self.steps = []

        def write(self, step, stats, findings, new):
            self.steps.append((step, stats.steps))

        def close(self):
            pass

    sink = Sink()
    torch.manual_seed(0)
    with leaky.Watch(every=1, sinks=[sink]) as run:
        train(MLP(), 25)
    assert [step for step, _ in sink.steps] == [0, CHECK_GAP, 2 * CHECK_GAP]
    assert [sampled for _, sampled in sink.steps] == [1, CHECK_GAP + 1, 2 * CHECK_GAP + 1]   # every step folded
    assert run.stats.steps == 25


def _one_firing(steps: int, fires_at: int, ctx):
    """A ReLU layer whose unit 1 fires at one step only; the others never."""
    lin = nn.Linear(4, 3)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.fill_(-1.0)
    opt = torch.optim.SGD(lin.parameters(), lr=0.0)
    x = torch.randn(8, 4)
    with ctx as run:
        for step in range(steps):
            bump = torch.zeros(3)
            if step == fires_at:
                bump[1] = 5.0
            loss = F.relu(lin(x) + bump).sum() + lin(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    (units,) = run.recorder.units.values()
    (relu,) = [op for op in run.stats.ops if op.op == "relu"]
    return units, {probe.count for probe in run.recorder.taps.inputs.values()}, relu.nonzero_in


def test_every_1_sees_a_unit_fire_at_any_step_and_counts_rates_every_10(tmp_path):
    """Whether a unit fired is taken at every sampled step (a unit that fires once, at a
    step whose rates are not counted, is alive until then); how often it fires, the input's
    averages and the share of gradient elements an op zeroes are counted at every step in an
    audit, and in a watch at every sampled step of the audit's window (the first
    DENSE_RATE_STEPS: there `watch --every 1` counts what `audit` counts), then at most once
    every RATE_GAP steps."""
    from leaky.record.activations import RATE_GAP
    from leaky.record.recorder import DENSE_RATE_STEPS

    counted = len(set(range(DENSE_RATE_STEPS)) | set(range(DENSE_RATE_STEPS, 50, RATE_GAP)))   # 0-19, 20, 30, 40
    units, inputs, arriving = _one_firing(50, 35, leaky.watch(every=1, store=tmp_path / "runs.db"))
    assert units.last_active.tolist() == [-1, 35, -1]
    assert units.samples == 50 * 8
    assert units.counted == counted * 8
    assert units.active.tolist() == [0, 0, 0]                      # step 35 fired but was not counted
    assert inputs == {counted * 8}                                 # the input averages too
    assert arriving == counted * 8 * 3                             # and the zeroed share's counts

    units, _, _ = _one_firing(50, 15, leaky.watch(every=1, store=tmp_path / "runs2.db"))
    assert units.active.tolist() == [0, 8, 0]                      # inside the window: counted, as an audit would

    units, inputs, arriving = _one_firing(30, 15, leaky.audit(steps=None))
    assert units.last_active.tolist() == [-1, 15, -1]
    assert units.counted == units.samples == 30 * 8
    assert units.active.tolist() == [0, 8, 0]
    assert inputs == {30 * 8}
    assert arriving == 30 * 8 * 3


def test_a_grad_scaler_made_before_the_watch_is_seen_by_every_check_pass(monkeypatch):
    """A check pass runs while the heap is frozen (process/heap.py), and a scaler made
    before `leaky.watch()` is among the frozen objects: the pass must still find it, or
    LK107 reports the overflow step that the scaler skips (and LK304 says no scaler is
    active). Here the scale doubles every step until float16 overflows at step 7."""
    import importlib
    watch_module = importlib.import_module("leaky.watch")
    scalers = []
    original = watch_module.run_all

    def seen(stats, config):
        scalers.append((stats.series[-1].step, stats.loss_scaler))
        return original(stats, config)

    monkeypatch.setattr(watch_module, "run_all", seen)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=1)
    scales = []
    with leaky.watch(every=1) as run:
        for _ in range(30):
            x = torch.randn(64, 16)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.mse_loss(model(x).float(), torch.tanh(x[:, :1]))
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
    overflowed = [step for step, (a, b) in enumerate(zip(scales, scales[1:]), 1) if b < a]
    assert overflowed and any(e.phase == "backward" for e in run.stats.nonfinite)   # the scaler skipped steps
    after = [scale for step, scale in scalers if step >= overflowed[0]]
    assert after and all(scale is not None for scale in after), scalers
    assert not [f for f in run.announced.values() if f.code == "LK107"]
