"""Training-dynamics checks on loops a naive tool would misread."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.demo import serious


def test_a_gan_with_one_optimizer_per_network_is_not_gradient_accumulation():
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)), nn.Sequential(
        nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters(), 1e-3), torch.optim.Adam(disc.parameters(), 1e-3)
    with leaky.audit(steps=None) as audit:
        for _ in range(20):
            real, noise = torch.randn(32, 2) + 2, torch.randn(32, 4)
            opt_d.zero_grad()
            d_loss = F.binary_cross_entropy_with_logits(disc(real), torch.ones(32, 1)) + \
                F.binary_cross_entropy_with_logits(disc(gen(noise).detach()), torch.zeros(32, 1))
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = F.binary_cross_entropy_with_logits(disc(gen(noise)), torch.ones(32, 1))
            g_loss.backward()     # also fills disc's .grad: zeroed before the next D step
            opt_g.step()
    assert audit.report.by_code("LK203") == []
    assert sum(audit.stats.carry_checked.values()) > 10


def test_the_loss_under_a_grad_scaler_is_recorded_unscaled():
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    plain = []
    with leaky.audit() as audit:
        for _ in range(6):
            x, y = torch.randn(16, 8), torch.randn(16, 1)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.mse_loss(model(x).float(), y)
            plain.append(loss.item())
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    recorded = [row.loss for row in audit.stats.series]
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(plain, recorded))


def test_a_zero_initialised_weight_with_momentum_is_not_a_high_update_ratio():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
    nn.init.zeros_(model[2].weight)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with leaky.audit() as audit:
        for _ in range(20):
            loss = F.cross_entropy(model(torch.randn(64, 10)), torch.randint(0, 3, (64,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert audit.report.by_code("LK202") == []


def test_update_ratios_skip_the_overflowed_steps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 32), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    with leaky.audit() as audit:
        for _ in range(25):
            x = torch.randn(64, 20) * 3
            loss = F.mse_loss(model(x), x.sum(1, keepdim=True) * 10)
            opt.zero_grad()
            loss.backward()
            opt.step()
    for param in audit.stats.params:
        assert all(math.isfinite(r) for _, r in param.update_ratios)
    assert audit.report.by_code("LK205")


def test_healthy_lr_schedules_stay_quiet():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=30)
    x, y = torch.randn(256, 10), torch.randint(0, 3, (256,))
    with leaky.audit(steps=None) as audit:
        for step in range(30):
            rows = slice((step % 4) * 64, (step % 4 + 1) * 64)
            loss = F.cross_entropy(model(x[rows]), y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            scheduler.step()
    assert serious(audit.report.findings) == [], [f.message for f in serious(audit.report.findings)]
