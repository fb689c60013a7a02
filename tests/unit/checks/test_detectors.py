"""Bugs from the benchmark zoo that earlier versions missed or explained wrongly."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import leaky


def _line(marker: str) -> int:
    with open(__file__, encoding="utf-8") as handle:
        return next(i for i, text in enumerate(handle, 1) if f"# {marker}" in text and "_line(" not in text)


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))


def test_optimizer_step_without_parentheses():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with leaky.audit() as audit:
        for _ in range(5):
            loss = F.mse_loss(model(torch.randn(16, 4)), torch.randn(16, 1))
            opt.zero_grad()
            loss.backward()
            opt.step  # noqa: B018  (the bug: never called)
    (finding,) = audit.report.by_code("LK201")
    assert finding.evidence["cause"] == "optimizer never stepped" and "parentheses" in finding.fix


def test_a_sigmoid_output_regressed_onto_large_targets():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1), nn.Sigmoid())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with leaky.audit() as audit:
        for _ in range(5):
            loss = F.mse_loss(model(torch.randn(16, 4)), torch.rand(16, 1) * 300)
            opt.zero_grad()
            loss.backward()
            opt.step()
    (finding,) = audit.report.by_code("LK301")
    assert finding.severity.value == "error" and "can never reach" in finding.message


def test_a_comparison_and_a_leaf_loss_cut_the_path():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with leaky.audit() as audit:
        for _ in range(4):
            hard = (torch.sigmoid(model(torch.randn(8, 4))) > 0.5).float()  # HARD-THRESHOLD
            loss = ((hard - 1) ** 2).mean()
            loss.requires_grad = True
            opt.zero_grad()
            loss.backward()
            opt.step()
    (finding,) = audit.report.by_code("LK108")
    assert finding.op == "nondiff:gt" and finding.source.line == _line("HARD-THRESHOLD")


def test_zero_grad_between_backward_and_step():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with leaky.audit() as audit:
        for _ in range(4):
            loss = F.mse_loss(model(torch.randn(16, 4)), torch.randn(16, 1))
            loss.backward()
            opt.zero_grad()  # ZERO-GRAD-BETWEEN
            opt.step()
    # backward() computed the gradients (no cut path, so not LK108): the optimizer never
    # applies them (LK201), and the finding points at the misplaced zero_grad().
    assert not audit.report.by_code("LK108")
    (finding,) = audit.report.by_code("LK201")
    assert finding.evidence["cause"] == "gradients cleared before the step"
    assert finding.source.line == _line("ZERO-GRAD-BETWEEN")
    assert "between backward() and step()" in finding.fix


def test_a_detach_after_an_activation_names_the_cut():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Linear(4, 8)
            self.head = nn.Linear(8, 1)

        def forward(self, x):
            h = F.relu(self.conv(x)).detach()  # DETACH-AFTER-RELU
            return self.head(h)

    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with leaky.audit() as audit:
        for _ in range(3):
            loss = net(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    (finding,) = audit.report.by_code("LK108")
    assert finding.module == "conv" and finding.op == "detach"
    assert finding.source.line == _line("DETACH-AFTER-RELU")


def test_a_gan_whose_generator_is_never_zeroed():
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    disc = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters(), 1e-3), torch.optim.Adam(disc.parameters(), 1e-3)
    with leaky.audit() as audit:
        for _ in range(12):
            real, noise = torch.randn(32, 2) + 2, torch.randn(32, 4)
            opt_d.zero_grad()
            d_loss = F.binary_cross_entropy_with_logits(disc(real), torch.ones(32, 1)) + \
                F.binary_cross_entropy_with_logits(disc(gen(noise).detach()), torch.zeros(32, 1))
            d_loss.backward()
            opt_d.step()
            g_loss = F.binary_cross_entropy_with_logits(disc(gen(noise)), torch.ones(32, 1))
            g_loss.backward()            # the bug: opt_g.zero_grad() is never called
            opt_g.step()
    (finding,) = audit.report.by_code("LK203")
    assert finding.evidence["modules"] == ["gen.0", "gen.2"]


def test_a_copy_that_is_only_evaluated_is_not_cut_off_without_an_optimizer():
    # word_language_model's idiom: manual SGD on p.data, then the best checkpoint reloaded
    # (a second model object) and evaluated under no_grad
    import copy

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    with leaky.audit(steps=None) as audit:
        for _ in range(5):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.1)
        best = copy.deepcopy(model)
        with torch.no_grad():
            F.mse_loss(best(x), y)
    assert not audit.report.by_code("LK108")


def test_a_branch_cut_off_without_an_optimizer_is_still_found():
    torch.manual_seed(0)
    trunk, head = nn.Linear(8, 16), nn.Linear(16, 1)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    with leaky.audit(steps=None) as audit:
        for _ in range(5):
            head.zero_grad()
            features = trunk(x).detach()
            loss = F.mse_loss(head(features), y)
            loss.backward()
            for p in head.parameters():
                p.data.add_(p.grad, alpha=-0.1)
    assert [f.module for f in audit.report.by_code("LK108")] == ["trunk"]
