"""An audit's steady steps (AuditConfig.steady_every): the first full_steps measured in full,
then one in steady_every; the light ones between keep the every-step series only, and the
audit still stops after its `steps` steps run (issue 34)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import leaky
from leaky.config import AuditConfig
from tests.models import MLP


def _train(steps: int, audit=None) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def test_full_steps_is_what_the_checks_of_consecutive_steps_need():
    config = AuditConfig()
    assert config.full_steps == max(config.dead_window_steps, config.spike_min_history + 1,
                                    config.accumulation_min_steps, config.stale_min_steps, config.update_min_steps)
    assert AuditConfig(dead_window_steps=7).full_steps == 7


def test_by_default_every_step_is_measured(monkeypatch):
    monkeypatch.delenv("LEAKY_STEADY_EVERY", raising=False)
    with leaky.audit(steps=12) as run:
        _train(12)
    assert run.stats.steps == 12 and tuple(run.stats.sample_steps) == tuple(range(12))


def test_steady_steps_are_light_and_the_audit_still_runs_its_steps(monkeypatch):
    monkeypatch.setenv("LEAKY_STEADY_EVERY", "4")
    config = AuditConfig()
    assert config.steady_every == 4 and config.full_steps == 5
    plain = _train(25)
    with leaky.audit(steps=20, config=config) as run:
        audited = _train(25)   # five steps past the limit: trained on, unobserved
    assert all(torch.equal(a, b) for a, b in zip(plain, audited))   # bit-identical
    assert tuple(run.stats.sample_steps) == (0, 1, 2, 3, 4, 8, 12, 16)
    assert run.stats.steps == 8 and len(run.stats.series) == 20   # the series: every step run
    report = run.report.to_dict()
    assert report["run"]["steps"] == 20 and report["run"]["sampled_steps"] == 8
