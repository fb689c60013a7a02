"""Classes the checks once missed or misjudged (issue 30), each on a real tiny model with a
real optimizer: the broken case found at its line, and a healthy look-alike that stays quiet.

- LK307: logits that reach the loss through a single-number scale (`head(h) / temperature`,
  `z @ prototypes.T / 0.1`, `logit_scale.exp() * head(h)`); quiet: a zero-init head divided
  by 0.1, CLIP-like normalised features.
- LK106: a clamp on a BCE input zeroes 2% of the elements and ~all of the gradient's mass;
  quiet: a clamped share regression whose clamp binds on harmless samples.
- LK304: a model kept in bfloat16 under AdamW at lr 1e-4: most weights cannot take their
  step (it rounds away); quiet: float32 master weights with bfloat16 autocast.
- LK101: a gumbel-softmax at tau = 0.05 (soft and hard=True) is one-hot from step 0; quiet:
  tau annealed from 1.
- LK101: a policy that collapses onto one action during training (REINFORCE without a
  baseline at lr 0.1: every row one-hot on the same action, the loss falling to 0 while the
  reward stays at chance); quiet: the same policy at lr 0.01 with a baseline, and a softmax
  classifier that grows confident on inputs of three classes.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.finding import Severity
from leaky.testing import activation, cast, loss_probe, op, optimizer, param, source, stats
from tests.check_cases import fires, quiet

HERE = Path(__file__)


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(HERE.read_text().splitlines(), 1) if text.rstrip().endswith(marker))


def _alarms(report, code: str):
    return [f for f in report.findings if f.code == code and f.severity is not Severity.INFO]


def _at(findings, line: int) -> bool:
    return any(line in {place.line for place in (f.source, f.cause) if place is not None} for f in findings)


# -- LK307: logits through a scale --------------------------------------------------------------
def _task():
    torch.manual_seed(0)
    x = torch.randn(512, 32)
    y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4] > 0).long()
    return x, y


def _train_scaled(logits_of, params, steps: int = 8):
    x, y = _task()
    opt = torch.optim.Adam(params, lr=1e-3)
    with leaky.audit(steps=steps) as audit:
        for step in range(steps):
            rows = torch.arange(64) + 64 * (step % 8)
            loss = F.cross_entropy(logits_of(x[rows]), y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit.report


def _body_and_head():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU()), nn.Linear(64, 10)


def test_a_head_divided_by_a_temperature_starts_far_above_log_c():
    body, head = _body_and_head()
    temperature = 0.05
    report = _train_scaled(lambda x: head(body(x)) / temperature,  # HEAD / TEMPERATURE
                           [*body.parameters(), *head.parameters()])
    (finding,) = _alarms(report, "LK307")
    assert finding.source.line == _line("# HEAD / TEMPERATURE") and finding.module == "head"
    assert finding.evidence["scale"] == pytest.approx(20.0) and finding.evidence["ratio"] > 2
    assert "multiplied by 20" in finding.message and "nn.init.zeros_" in finding.fix


def test_prototypes_over_a_temperature_start_far_above_log_c():
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
    prototypes = nn.Parameter(torch.randn(10, 16))
    report = _train_scaled(lambda x: encoder(x) @ prototypes.T / 0.1,  # PROTOTYPES / 0.1
                           [*encoder.parameters(), prototypes])
    (finding,) = _alarms(report, "LK307")
    assert finding.source.line == _line("# PROTOTYPES / 0.1") and finding.evidence["ratio"] > 3


def test_a_learnt_logit_scale_times_a_head_starts_far_above_log_c():
    body, head = _body_and_head()
    logit_scale = nn.Parameter(torch.tensor(math.log(100.0)))
    report = _train_scaled(lambda x: logit_scale.exp() * head(body(x)),  # LOGIT SCALE
                           [*body.parameters(), *head.parameters(), logit_scale])
    (finding,) = _alarms(report, "LK307")
    assert finding.source.line == _line("# LOGIT SCALE") and finding.evidence["scale"] == pytest.approx(100, rel=1e-3)


def test_a_zero_init_head_divided_by_a_temperature_is_quiet():
    body, head = _body_and_head()
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    report = _train_scaled(lambda x: head(body(x)) / 0.1, [*body.parameters(), *head.parameters()])
    assert _alarms(report, "LK307") == []


def test_clip_like_normalised_features_with_a_logit_scale_are_quiet():
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64))
    prototypes = nn.Parameter(torch.randn(10, 64))
    logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
    report = _train_scaled(
        lambda x: logit_scale.exp() * F.normalize(encoder(x), dim=-1) @ F.normalize(prototypes, dim=-1).T,
        [*encoder.parameters(), prototypes, logit_scale])
    assert _alarms(report, "LK307") == []


def test_lk307_judges_the_layer_behind_a_scale_on_hand_built_stats():
    head = op(site=3, op="matmul", module="head", source=source(line=10))
    div = op(site=5, op="div", module=None, source=source(line=11))
    start = {"neutral": "classes", "loss": 13.3, "classes": 10, "scaled_site": 3, "scale": 10.0}
    finding = fires("LK307", stats(steps=20, ops=(head, div), losses_seen=(loss_probe(site=4, input_site=5, start=start),)))
    assert finding.source.line == 11 and finding.module == "head" and "multiplied by 10 (train.py:11)" in finding.message
    unscaled = {k: v for k, v in start.items() if k not in ("scaled_site", "scale")}
    quiet("LK307", stats(steps=20, ops=(head, div), losses_seen=(loss_probe(site=4, input_site=5, start=unscaled),)))


# -- LK101: every softmax-like op ---------------------------------------------------------------
def _train_codes(sample, steps: int = 10):
    """A discrete auto-encoder: 8 categorical codes through `sample(logits, step)`."""
    torch.manual_seed(0)
    x = torch.randn(512, 16)
    encoder, decoder = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8)), nn.Linear(8, 16)
    opt = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=1e-3)
    with leaky.audit(steps=steps) as audit:
        for step in range(steps):
            xb = x[64 * (step % 8):64 * (step % 8 + 1)]
            loss = F.mse_loss(decoder(sample(encoder(xb), step)), xb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit.report


@pytest.mark.parametrize("hard", [False, True])
def test_a_gumbel_softmax_at_tau_005_is_one_hot_from_the_start(hard):
    report = _train_codes(lambda logits, step: F.gumbel_softmax(logits, tau=0.05, hard=hard))  # GUMBEL
    (finding,) = _alarms(report, "LK101")
    assert finding.op == "gumbel_softmax" and finding.source.line == _line("# GUMBEL")
    assert finding.evidence["first_step_flat_row_share"] > 0.5 and "anneal" in finding.fix
    assert finding.cause is None   # tau makes the rows one-hot, not the logits


def test_a_gumbel_softmax_annealed_from_tau_1_is_quiet():
    report = _train_codes(lambda logits, step: F.gumbel_softmax(logits, tau=max(0.5, math.exp(-0.05 * step))))
    assert _alarms(report, "LK101") == []


# -- LK106: a dead zone judged by the gradient mass it zeroes -----------------------------------
def _train_clamped(loss_of, scale: float, steps: int = 40):
    """A linear model whose output is clamped to [0, 1] inside `loss_of(out, x, y)`; the audit."""
    torch.manual_seed(0)
    x = torch.randn(1024, 16)
    y = (x[:, :3].sum(1, keepdim=True) > 0).float()
    model = nn.Linear(16, 1)
    with torch.no_grad():
        model.weight.mul_(scale)
        model.bias.fill_(0.5)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with leaky.audit(steps=steps) as audit:
        for step in range(steps):
            rows = slice(64 * (step % 16), 64 * (step % 16 + 1))
            loss = loss_of(model(x[rows]), x[rows], y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit


def test_a_clamp_on_a_bce_input_drops_most_of_the_gradient_mass():
    audit = _train_clamped(lambda out, x, y: F.binary_cross_entropy(torch.clamp(out, 0, 1), y), 0.7)  # CLAMP BCE
    (finding,) = _alarms(audit.report, "LK106")
    assert finding.source.line == _line("# CLAMP BCE") and finding.severity is Severity.ERROR
    assert finding.evidence["zeroed_share"] < 0.05 < 0.99 < finding.evidence["zeroed_mass_share"]
    assert "By gradient mass it drops 100%" in finding.message


def test_a_clamp_that_binds_on_harmless_samples_is_quiet():
    w = torch.randn(16, generator=torch.Generator().manual_seed(1)) / 4

    def share_loss(out, x, y):   # a share in [0.05, 0.95]: the clamp binds where the target is near a bound
        return F.mse_loss(torch.clamp(out, 0, 1), 0.05 + 0.9 * torch.sigmoid(x @ w)[:, None])
    audit = _train_clamped(share_loss, 0.4)
    assert _alarms(audit.report, "LK106") == []
    (clamp,) = [op for op in audit.stats.ops if op.op == "clamp"]
    assert 0 < clamp.zeroed_share < clamp.zeroed_mass_share < 0.05   # it binds, on small gradients


def test_lk106_weighs_a_loss_path_clamp_by_its_gradient_mass_on_hand_built_stats():

    def clamp(mass):
        return stats(steps=20, ops=(op(site=2, op="clamp", zeroed_share=0.02, nonzero_in=2000.0, loss_path=True,
                                       zeroed_mass_share=mass),))
    assert fires("LK106", clamp(0.3)).severity is Severity.WARNING
    assert fires("LK106", clamp(0.999)).severity is Severity.ERROR
    quiet("LK106", clamp(0.03))
    quiet("LK106", clamp(None))


# -- LK304: updates that round away -------------------------------------------------------------
def _train_low_precision(autocast: bool, steps: int = 6):
    x, y = _task()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10))
    with leaky.audit(steps=steps) as audit:
        if not autocast:
            model = model.to(torch.bfloat16)  # BF16 WEIGHTS
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for step in range(steps):
            rows = slice(64 * step, 64 * (step + 1))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = model(x[rows] if autocast else x[rows].bfloat16())
            loss = F.cross_entropy(out.float(), y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit


def test_a_model_kept_in_bfloat16_loses_most_of_its_updates_to_rounding():
    audit = _train_low_precision(autocast=False)
    (finding,) = _alarms(audit.report, "LK304")
    assert finding.source.line == _line("# BF16 WEIGHTS")
    assert finding.evidence["unchanged_share"] > 0.5 and finding.evidence["dtype"] == "bfloat16"
    assert "rounds away" in finding.message and "torch.autocast" in finding.fix
    assert finding.evidence["unchanged_share"] == pytest.approx(_raw_unchanged_share(), abs=0.01)


def _raw_unchanged_share(steps: int = 6) -> float:
    """The same run in raw torch: of the elements with a nonzero gradient, the share a step left unchanged."""
    x, y = _task()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10)).to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    graded = unchanged = 0
    for step in range(steps):
        rows = slice(64 * step, 64 * (step + 1))
        loss = F.cross_entropy(model(x[rows].bfloat16()).float(), y[rows])
        opt.zero_grad()
        loss.backward()
        before = [p.detach().clone() for p in model.parameters()]
        opt.step()
        for p, b in zip(model.parameters(), before):
            graded += int((p.grad != 0).sum())
            unchanged += int(((p.grad != 0) & (p == b)).sum())
    return unchanged / graded


def test_float32_master_weights_under_bfloat16_autocast_are_quiet():
    audit = _train_low_precision(autocast=True)
    assert _alarms(audit.report, "LK304") == []
    assert all(p.rounded_share is None and p.dtype == "float32" for p in audit.stats.params)


def test_lk304_rounded_updates_on_hand_built_stats():

    def kept_in(dtype, share):
        return stats(steps=20, optimizers=(optimizer(kind="AdamW", lr=1e-4),),
                     casts=(cast(kind="module", dtype="bfloat16", source=source(line=7)),),
                     params=(param(name="fc.weight", shape=(256, 32), dtype=dtype, rounded_share=share),
                             param(name="fc.bias", shape=(256,), dtype=dtype, rounded_share=share)))
    finding = fires("LK304", kept_in("bfloat16", 0.8))
    assert (finding.severity, finding.source.line) == (Severity.WARNING, 7)
    assert "every weight above 1.0e-04 / 0.00391 = 0.0256 keeps its value" in finding.message
    assert fires("LK304", kept_in("bfloat16", 0.95)).severity is Severity.ERROR
    quiet("LK304", kept_in("bfloat16", 0.3))
    quiet("LK304", kept_in("float32", None))


# -- LK101: a softmax that collapses during training -------------------------------------------
def _train_policy(lr: float, baseline: bool, steps: int = 20):
    """A contextual bandit whose states carry little signal (like a pole near balance): the
    best of three actions is the largest of the state's first three features."""
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 3))
    with leaky.audit(steps=steps) as audit:
        opt = torch.optim.Adam(policy.parameters(), lr=lr)  # POLICY LR
        for _ in range(steps):
            x = 0.05 * torch.randn(64, 4)
            probs = F.softmax(policy(x), dim=-1)  # POLICY SOFTMAX
            dist = torch.distributions.Categorical(probs)
            action = dist.sample()
            reward = 1.0 + (action == x[:, :3].argmax(1)).float()
            advantage = reward - reward.mean() if baseline else reward
            loss = -(dist.log_prob(action) * advantage).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return audit


def test_a_policy_that_collapses_onto_one_action_is_found_at_its_softmax():
    audit = _train_policy(lr=0.1, baseline=False)
    (finding,) = _alarms(audit.report, "LK101")
    assert finding.source.line == _line("# POLICY SOFTMAX") and finding.cause.line == _line("# POLICY LR")
    assert finding.evidence["developed"] and finding.evidence["first_step_flat_row_share"] < 0.5
    assert finding.evidence["recent_flat_row_share"] > 0.9 and finding.evidence["recent_mean_row_jacobian_share"] < 0.01
    assert "entropy" in finding.fix


def test_a_policy_learning_slowly_with_a_baseline_is_quiet():
    assert _alarms(_train_policy(lr=0.01, baseline=True).report, "LK101") == []


def test_a_classifier_that_grows_confident_on_several_classes_is_quiet():
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = x[:, :3].argmax(1)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 3))
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    with leaky.audit(steps=40) as audit:
        for _ in range(40):
            p = F.softmax(model(x) * 3, dim=-1)
            loss = F.nll_loss(torch.log(p + 1e-9), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert _alarms(audit.report, "LK101") == []
    (softmax,) = [a for a in audit.stats.activations if a.family == "softmax"]
    assert softmax.recent_flat_share > 0.5 > softmax.first_flat_share   # confident: it grew peaked rows
    assert softmax.recent_mean_row_share > 0.5                         # ... on different classes


def test_lk101_a_collapsed_output_softmax_on_hand_built_stats():

    def softmax(first=0.0, recent=0.95, mean_row=0.003, loss_path=True):
        act = activation(site=2, op="softmax", module="policy", first_flat_share=first, recent_flat_share=recent,
                         recent_mean_row_share=mean_row, recent_span=(15, 19),
                         detail={"dim_size": 3, "scores_site": 1})
        ops_ = (op(site=1, op="linear", module="policy.2"), op(site=2, op="softmax", module="policy", loss_path=loss_path))
        return stats(steps=20, activations=(act,), ops=ops_, params=(param(name="policy.2.weight"),))
    finding = fires("LK101", softmax())
    assert finding.severity is Severity.ERROR and finding.evidence["developed"]
    assert "collapsed during training" in finding.message and "steps 15-19" in finding.message
    assert fires("LK101", softmax(recent=0.6)).severity is Severity.WARNING
    quiet("LK101", softmax(mean_row=0.4))          # confident on several entries: a classifier that learned
    quiet("LK101", softmax(loss_path=False))       # attention that learned to look at one key
    quiet("LK101", softmax(recent=0.3))            # not flat
