"""Training-dynamics findings point at the line that set them up: the optimizer's
construction, the scheduler's lr function, the parameter's creation, the zero_grad() or
step() call, the low-precision cast, the layer's definition in an nn.Sequential."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.zoo.wiring import SmallRegressor


def _line(marker: str) -> int:
    with open(__file__, encoding="utf-8") as handle:
        return next(i for i, text in enumerate(handle, 1) if f"# {marker}" in text and "_line(" not in text)


def _data(n: int = 64):
    gen = torch.Generator().manual_seed(3)
    return torch.randn(n, 8, generator=gen), torch.randn(n, 1, generator=gen)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))


def _train(model, opt, steps: int = 8, scheduler=None, zero: bool = True) -> None:
    x, y = _data()
    for _ in range(steps):
        loss = F.mse_loss(model(x), y)
        if zero:
            opt.zero_grad()  # ZERO-CALL
        loss.backward()
        opt.step()  # STEP-CALL
        if scheduler is not None:
            scheduler.step()  # SCHEDULER-STEP


def _lines(findings) -> set[int]:
    return {f.source.line for f in findings if f.source is not None}


def test_a_too_high_learning_rate_points_at_the_optimizer():
    model = _mlp()
    with leaky.audit(steps=None) as audit:
        opt = torch.optim.SGD(model.parameters(), lr=20.0)  # HIGH-LR
        _train(model, opt)
    findings = [f for f in audit.report.by_code("LK202") if f.evidence["direction"] == "high"]
    assert findings and _lines(findings) == {_line("HIGH-LR")}
    assert "where SGD is built" in findings[0].message


def test_a_rate_a_scheduler_shrank_points_at_its_lr_function():
    model = _mlp()
    with leaky.audit(steps=None) as audit:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1e-5)  # TINY-FACTOR
        _train(model, opt, scheduler=scheduler)
    findings = [f for f in audit.report.by_code("LK202") if f.evidence["direction"] == "low"]
    assert findings and _lines(findings) == {_line("TINY-FACTOR")}
    assert "LambdaLR" in findings[0].message


def test_updates_rounded_away_under_a_shrunk_rate_point_at_the_scheduler():
    model = _mlp()
    with leaky.audit(steps=None) as audit:
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1e-9)  # ROUNDED-AWAY
        _train(model, opt, scheduler=scheduler)
    findings = audit.report.by_code("LK201")
    assert findings and _lines(findings) == {_line("ROUNDED-AWAY")}


def _integer_warmup(step):
    return min(1.0, step // 100)  # WARMUP-RETURN


def test_a_learning_rate_a_scheduler_set_to_zero_points_at_its_lr_function():
    model = _mlp()
    with leaky.audit(steps=None) as audit:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda=_integer_warmup)
        _train(model, opt, scheduler=scheduler)
    findings = audit.report.by_code("LK201")
    assert findings and _lines(findings) == {_line("WARMUP-RETURN")}
    assert "lr was 0" in findings[0].message


def test_a_layer_replaced_after_the_optimizer_points_at_its_creation():
    with leaky.audit(steps=None) as audit:
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        model[2] = nn.Linear(32, 1)  # NEW-HEAD
        _train(model, opt)
    (finding,) = audit.report.by_code("LK201")
    assert finding.module == "2" and finding.source.line == _line("NEW-HEAD")
    assert "after the optimizer was built" in finding.message


def test_a_layer_left_out_of_the_optimizer_points_at_the_optimizer():
    with leaky.audit(steps=None) as audit:
        model = _mlp()
        opt = torch.optim.SGD(model[0].parameters(), lr=0.05)  # PARTIAL-OPTIMIZER
        _train(model, opt)
    (finding,) = audit.report.by_code("LK201")
    assert finding.module == "2" and finding.source.line == _line("PARTIAL-OPTIMIZER")


def test_zero_grad_outside_the_loop_points_at_that_call():
    model = _mlp()
    x, y = _data()
    with leaky.audit(steps=None) as audit:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        opt.zero_grad()  # ONCE-PER-EPOCH
        for _ in range(8):
            F.mse_loss(model(x), y).backward()
            opt.step()
    (finding,) = audit.report.by_code("LK203")
    assert finding.source.line == _line("ONCE-PER-EPOCH")


def test_gradients_never_zeroed_point_at_the_step_call():
    model = _mlp()
    with leaky.audit(steps=None) as audit:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        _train(model, opt, zero=False)
    (finding,) = audit.report.by_code("LK203")
    assert finding.source.line == _line("STEP-CALL")


def test_a_model_zero_grad_counts_for_its_optimizer():
    model = _mlp()
    x, y = _data()
    with leaky.audit(steps=None) as audit:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for _ in range(8):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    assert not audit.report.by_code("LK203") and not audit.report.by_code("LK201")


def test_optimizer_step_named_but_not_called_points_at_that_statement():
    model = _mlp()
    x, y = _data()
    with leaky.audit(steps=None) as audit:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for _ in range(4):
            opt.zero_grad()  # ZERO-CALL
            F.mse_loss(model(x), y).backward()
            opt.step  # BARE-STEP  # noqa: B018
    (finding,) = audit.report.by_code("LK201")
    assert finding.evidence["cause"] == "optimizer never stepped"
    assert finding.source.line == _line("BARE-STEP")


def _residual_batches(dtype, steps: int = 20):
    """Targets of size ~1e-3 (a residual): per-element gradients of ~1e-6 and below."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(512, 16, generator=gen)
    y = torch.tanh(x[:, :1]) * 1e-3
    rows = [slice(128 * (i % 4), 128 * (i % 4) + 128) for i in range(steps)]
    return [(x[r].to(dtype), y[r].to(dtype)) for r in rows]


def test_model_half_points_at_the_cast():
    torch.manual_seed(0)
    with leaky.audit(steps=None) as audit:
        model = SmallRegressor()
        model = model.half()  # HALF-CAST
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        for x, y in _residual_batches(torch.float16):
            loss = F.mse_loss(model(x).float(), y.float())
            opt.zero_grad()  # ZERO-CALL
            loss.backward()
            opt.step()
    (finding,) = audit.report.by_code("LK304")
    assert finding.source.line == _line("HALF-CAST")
    assert finding.evidence["op_source"]


def test_float16_autocast_points_at_the_region():
    torch.manual_seed(0)
    model = SmallRegressor()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with leaky.audit(steps=None) as audit:
        for x, y in _residual_batches(torch.float32):
            with torch.autocast("cpu", dtype=torch.float16):  # FP16-AUTOCAST
                loss = F.mse_loss(model(x).float(), y.float())
            opt.zero_grad()  # ZERO-CALL
            loss.backward()
            opt.step()
    (finding,) = audit.report.by_code("LK304")
    assert finding.source.line == _line("FP16-AUTOCAST")


def test_a_layer_inside_a_sequential_points_at_its_definition():
    torch.manual_seed(0)
    x, y = torch.randn(64, 8), torch.randint(0, 4, (64,))
    with leaky.audit(steps=None) as audit:
        model = nn.Sequential(
            nn.Linear(8, 16), nn.ReLU(),
            nn.Linear(16, 4),
            nn.Softmax(dim=1),  # SOFTMAX-LAYER
        )
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(4):
            loss = F.cross_entropy(model(x), y)  # MODEL-CALL
            opt.zero_grad()  # ZERO-CALL
            loss.backward()
            opt.step()
    (finding,) = audit.report.by_code("LK301")
    assert finding.module == "3" and finding.source.line == _line("SOFTMAX-LAYER")


@pytest.mark.parametrize("observe", ["audit", "watch"])
def test_each_zero_grad_and_scheduler_step_is_placed_at_its_callers_line(tmp_path, observe):
    """The places are looked for from the patched call's caller up (record/origins.py): the
    same line under an audit and a watch, whose budget times the note."""
    model = _mlp()
    context = leaky.audit(steps=None) if observe == "audit" else leaky.watch(store=tmp_path / "runs.db")
    with context as run:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=3)
        _train(model, opt, steps=12, scheduler=scheduler)
    origins = run.recorder.origins
    (sched,) = [s for s in origins.schedulers if s.scheduler is not None and s.scheduler() is scheduler]
    assert sched.step_calls == 12 and sched.step_at[:2] == (__file__, _line("SCHEDULER-STEP"))
    assert {(site.where[0], site.where[1]) for site in origins.zero_grads.values()} == {(__file__, _line("ZERO-CALL"))}
